package fs

import "testing"

// TestMountTypeIsTheTopmostMountAtTheUnescapedPath: a mount point with a
// space is written \040 in mountinfo, and of two mounts stacked on one
// point the later line is the one a path reaches.
func TestMountTypeIsTheTopmostMountAtTheUnescapedPath(t *testing.T) {
	table := []byte(`22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:40 / /mnt/a\040b rw,nosuid - tmpfs tmpfs rw,size=1024k
31 30 0:41 / /mnt/a\040b ro,nosuid,nodev,relatime shared:7 master:2 - fuse.corgifs /data/src ro,user_id=0,group_id=0
32 22 0:42 / /mnt/plain rw - tmpfs tmpfs rw
`)
	cases := []struct {
		path string
		want string
		ok   bool
	}{
		{"/mnt/a b", "fuse.corgifs", true},
		{"/mnt/plain", "tmpfs", true},
		{"/", "ext4", true},
		{`/mnt/a\040b`, "", false},
		{"/mnt", "", false},
	}
	for _, c := range cases {
		got, ok := mountTypeAt(table, c.path)
		if got != c.want || ok != c.ok {
			t.Errorf("mountTypeAt(%q) = %q, %v; want %q, %v", c.path, got, ok, c.want, c.ok)
		}
	}
}
