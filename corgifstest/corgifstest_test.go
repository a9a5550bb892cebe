package corgifstest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corgifs/corgifs/corgifstest"
	"github.com/corgifs/corgifs/internal/childmount"
	"github.com/corgifs/corgifs/internal/testenv"
)

// TestMountServesEveryRecordOnceAndLeavesNothingMounted reads both parts
// of an epoch of a mount, and checks that when the (sub)test ends the
// daemon has exited and its mount point is no longer mounted.
func TestMountServesEveryRecordOnceAndLeavesNothingMounted(t *testing.T) {
	var m *corgifstest.Daemon
	t.Run("mount", func(t *testing.T) {
		src := t.TempDir()
		want := corgifstest.WriteDataset(t, src, 600, corgifstest.Files(3))
		m = corgifstest.Mount(t, src, corgifstest.Seed(3), corgifstest.Parts(2), corgifstest.BlockSize(4096))
		if !childmount.Mounted(m.Dir) {
			t.Fatalf("%s is not a mount point", m.Dir)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/status", m.PID())); err != nil {
			t.Fatalf("PID %d: %v", m.PID(), err)
		}
		got := append(m.Records(0, 0, 2), m.Records(0, 1, 2)...)
		slices.SortFunc(got, bytes.Compare)
		slices.SortFunc(want, bytes.Compare)
		if !slices.EqualFunc(got, want, bytes.Equal) {
			t.Fatalf("epoch 0 serves %d records, not the %d written once each", len(got), len(want))
		}
		if b := m.ReadPart(1, 0, 1); len(b) == 0 {
			t.Fatal("epoch 1 part 0 of 1 is empty")
		}
		if !strings.Contains(m.Log(), "mounted") {
			t.Errorf("the daemon's log does not say it mounted:\n%s", m.Log())
		}
	})
	if m == nil {
		return
	}
	checkGone(t, m.Dir, m.PID())
}

// TestUnmountChecksTheDaemonExitsZero: Unmount stops the daemon at once,
// and a second Unmount (and the cleanup) does nothing.
func TestUnmountChecksTheDaemonExitsZero(t *testing.T) {
	src := t.TempDir()
	corgifstest.WriteDataset(t, src, 100)
	m := corgifstest.Mount(t, src, corgifstest.Seed(1))
	m.Unmount()
	select {
	case <-m.Done():
	default:
		t.Fatal("the daemon is still running after Unmount")
	}
	if err := m.ExitErr(); err != nil {
		t.Fatalf("exit status %v", err)
	}
	m.Unmount()
	checkGone(t, m.Dir, m.PID())
}

// TestKillLeavesNothingMounted: a daemon killed by the test leaves a dead
// mount, which Kill detaches without failing the test.
func TestKillLeavesNothingMounted(t *testing.T) {
	src := t.TempDir()
	corgifstest.WriteDataset(t, src, 100)
	m := corgifstest.Mount(t, src, corgifstest.Seed(1))
	m.Process().Signal(syscall.SIGKILL)
	<-m.Done()
	m.Kill()
	checkGone(t, m.Dir, m.PID())
}

// TestWriteDatasetWritesEveryFormatItReads: every format's files read back
// as n distinct records.
func TestWriteDatasetWritesEveryFormatItReads(t *testing.T) {
	for _, f := range corgifstest.DatasetFormats() {
		t.Run(f, func(t *testing.T) {
			dir := t.TempDir()
			recs := corgifstest.WriteDataset(t, dir, 50, corgifstest.Format(f), corgifstest.Files(2), corgifstest.RecordBytes(40))
			seen := map[string]bool{}
			for _, r := range recs {
				seen[string(r)] = true
			}
			if len(seen) != 50 {
				t.Fatalf("%d distinct records of 50", len(seen))
			}
			names, _ := filepath.Glob(filepath.Join(dir, "*"))
			if len(names) != 2 {
				t.Fatalf("files %v, want 2", names)
			}
		})
	}
}

// TestCleanupRunsWhenTheTestFailsOrPanics runs a test that mounts and then
// calls t.Fatal in a subtest, or panics, in a child `go test` process
// (this test binary, re-executed). A cleanup registered before the mount
// runs after corgifstest's and records what it sees: the daemon gone and
// nothing mounted. The child's own exit would end the daemon anyway
// (it gets SIGTERM when its parent dies), so that record is the proof.
func TestCleanupRunsWhenTheTestFailsOrPanics(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Missing(t, "no /dev/fuse")
	}
	for _, how := range []string{"fatal", "panic"} {
		t.Run(how, func(t *testing.T) {
			report := filepath.Join(t.TempDir(), "report.json")
			cmd := exec.Command(os.Args[0], "-test.run", "^TestHelperFailsWithAMount$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "CORGIFSTEST_HELPER="+how, "CORGIFSTEST_REPORT="+report)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("the helper test did not fail (%v):\n%s", err, out)
			}
			want := map[string]string{"fatal": "the test fails here", "panic": "panic: the test panics here"}[how]
			if !bytes.Contains(out, []byte(want)) {
				t.Fatalf("the helper did not fail the way it should (want %q):\n%s", want, out)
			}
			b, err := os.ReadFile(report)
			if err != nil {
				t.Fatalf("the helper's last cleanup did not run: %v\n%s", err, out)
			}
			var r helperReport
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			if r.Dir == "" || r.StillMounted || !r.DaemonExited {
				t.Fatalf("after the %s, the cleanup saw %+v\n%s", how, r, out)
			}
			checkGone(t, r.Dir, r.PID)
		})
	}
}

type helperReport struct {
	Dir          string
	PID          int
	StillMounted bool
	DaemonExited bool
}

// TestMain leaves TestHelperFailsWithAMount out of ordinary runs: it fails
// on purpose, in a test binary that TestCleanupRunsWhenTheTestFailsOrPanics
// starts with CORGIFSTEST_HELPER set (and -test.run selecting it).
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("CORGIFSTEST_HELPER") == "" {
		skip := "^TestHelperFailsWithAMount$"
		if s := flag.Lookup("test.skip").Value.String(); s != "" {
			skip += "|" + s
		}
		flag.Set("test.skip", skip)
	}
	os.Exit(m.Run())
}

// TestHelperFailsWithAMount is run by TestCleanupRunsWhenTheTestFailsOrPanics.
func TestHelperFailsWithAMount(t *testing.T) {
	how := os.Getenv("CORGIFSTEST_HELPER")
	if how == "" {
		t.Fatal("TestMain leaves this test out unless TestCleanupRunsWhenTheTestFailsOrPanics starts it")
	}
	src := t.TempDir()
	corgifstest.WriteDataset(t, src, 100)
	var m *corgifstest.Daemon
	t.Cleanup(func() { // runs after the mount's cleanup
		if m == nil {
			return
		}
		exited := false
		select {
		case <-m.Done():
			exited = true
		default:
		}
		b, _ := json.Marshal(helperReport{Dir: m.Dir, PID: m.PID(), StillMounted: childmount.Mounted(m.Dir), DaemonExited: exited})
		os.WriteFile(os.Getenv("CORGIFSTEST_REPORT"), b, 0o644)
	})
	t.Run("sub", func(t *testing.T) {
		m = corgifstest.Mount(t, src, corgifstest.Seed(1))
		m.ReadPart(0, 0, 1)
		if how == "panic" {
			panic("the test panics here")
		}
		t.Fatal("the test fails here")
	})
}

// checkGone fails the test if dir is mounted or process pid is still a
// corgifs daemon.
func checkGone(t *testing.T, dir string, pid int) {
	t.Helper()
	if childmount.Mounted(dir) {
		childmount.Detach(dir)
		t.Errorf("%s still mounted after the test ended", dir)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(b, []byte("mount")) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("daemon %d still running after the test ended", pid)
			return
		}
	}
}

// TestRecordsOfEveryFormatAreTheWrittenOnesOncePerEpoch mounts a dataset
// of every format WriteDataset writes and reads an epoch's two parts with
// Records: together they hold the written records, once each.
func TestRecordsOfEveryFormatAreTheWrittenOnesOncePerEpoch(t *testing.T) {
	for _, f := range corgifstest.DatasetFormats() {
		t.Run(f, func(t *testing.T) {
			src := t.TempDir()
			want := corgifstest.WriteDataset(t, src, 300, corgifstest.Format(f), corgifstest.Files(3))
			m := corgifstest.Mount(t, src, corgifstest.Seed(2), corgifstest.Parts(2))
			got := append(m.Records(0, 0, 2), m.Records(0, 1, 2)...)
			slices.SortFunc(got, bytes.Compare)
			slices.SortFunc(want, bytes.Compare)
			if !slices.EqualFunc(got, want, bytes.Equal) {
				t.Fatalf("epoch 0 serves %d records, not the %d written once each", len(got), len(want))
			}
		})
	}
}
