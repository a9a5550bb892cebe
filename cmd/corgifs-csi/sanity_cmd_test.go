package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sanitySkip are the csi-sanity specs a node-only driver skips: those of
// the controller, group controller and snapshot services, and the node
// spec that provisions its volume with CreateVolume.
const sanitySkip = "Controller Server|GroupController|should remove target path"

// TestCSISanityCommandPassesAgainstTheDriverBinary runs the upstream
// csi-sanity command (this module's `go tool csi-sanity`, pinned in
// go.mod) against the corgifs-csi binary serving a unix socket, as a CI
// job of a CSI driver does: separate processes, the flags a user gives.
func TestCSISanityCommandPassesAgainstTheDriverBinary(t *testing.T) {
	bin := corgifsBinary(t)
	src := dataset(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	build := func(out string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", out}, args...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	driverBin, sanityBin := filepath.Join(tmp, "corgifs-csi"), filepath.Join(tmp, "csi-sanity")
	build(driverBin, ".")
	build(sanityBin, "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity")

	sockDir, err := os.MkdirTemp("", "csi") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "csi.sock")
	var driverLog strings.Builder
	driver := exec.CommandContext(ctx, driverBin, "--endpoint=unix://"+sock, "--node-id=node-1", "--corgifs="+bin, "--state-dir="+filepath.Join(tmp, "state"))
	driver.Stdout, driver.Stderr = &driverLog, &driverLog
	if err := driver.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		driver.Process.Signal(os.Interrupt)
		driver.Wait()
		t.Logf("corgifs-csi:\n%s", driverLog.String())
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("corgifs-csi did not create %s", sock)
		}
	}
	params := filepath.Join(tmp, "params.yaml")
	if err := os.WriteFile(params, []byte("source: "+src+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, sanityBin,
		"--csi.endpoint=unix://"+sock,
		"--csi.mountdir="+filepath.Join(tmp, "mount"),
		"--csi.stagingdir="+filepath.Join(tmp, "staging"),
		"--csi.testvolumeparameters="+params,
		"--ginkgo.skip="+sanitySkip,
		"--ginkgo.no-color",
	).CombinedOutput()
	t.Logf("csi-sanity:\n%s", out)
	if err != nil {
		t.Fatalf("csi-sanity: %v", err)
	}
	if !strings.Contains(string(out), "0 Failed") {
		t.Errorf("csi-sanity's summary has failures")
	}
}
