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
	// The mount is in the table as soon as the kernel has it, before the
	// daemon's Serve has returned and raised the readahead: poll, as for a
	// log line.
	p := "/sys/class/bdi/" + dev + "/read_ahead_kb"
	got, ok := awaitLog(func() string {
		ra, err := os.ReadFile(p)
		if err != nil {
			return err.Error()
		}
		return strings.TrimSpace(string(ra))
	}, func(s string) bool { return s == "4096" })
	if !ok {
		t.Fatalf("read_ahead_kb of the mount's device %s is %s after %v, want 4096", dev, got, logLimit)
	}
}
