package tests

import (
	"os"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/internal/testenv"
)

// TestMountRaisesTheKernelsReadaheadTo4MiB: the daemon finds its mount's
// device in /proc/self/mountinfo (never by a stat through its own mount,
// which can hang the daemon's exit when it is killed) and sets the
// kernel's readahead of that device to 4 MiB.
func TestMountRaisesTheKernelsReadaheadTo4MiB(t *testing.T) {
	fuseOK(t)
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root: raising the readahead needs it, and a mount keeps the default without it")
	}
	src := genSynthetic(t, 500, 4, 2, 1, "shuffled")
	m := startMount(t, src, "--seed", "1")
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var dev string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == m.dir {
			dev = f[2]
		}
	}
	if dev == "" {
		t.Fatalf("%s is not in /proc/self/mountinfo", m.dir)
	}
	ra, err := os.ReadFile("/sys/class/bdi/" + dev + "/read_ahead_kb")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(ra)); got != "4096" {
		t.Fatalf("read_ahead_kb of the mount's device %s is %s, want 4096", dev, got)
	}
}
