package tests

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/corgifs/corgifs/internal/testenv"
)

// goTestModule runs the tests of one of the repository's other modules
// (cmd/corgifs-csi, deploy/kubernetes: their dependencies stay out of
// this module's go.mod), so that the one test command of README.md runs
// them too.
func goTestModule(t *testing.T, dir, run string, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	args := []string{"test", "-count=1", "-run", run}
	if testing.Verbose() {
		args = append(args, "-v")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./...")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("go test in %s:\n%s", dir, out)
	if err != nil {
		t.Fatalf("go test in %s: %v", dir, err)
	}
}

// TestCSIDriverPassesCSISanityAndPublishesMounts runs the CSI node
// driver's module tests: the upstream csi-sanity suite against the driver
// on a unix socket, and NodePublishVolume/NodeUnpublishVolume of a real
// mount with this tree's daemon.
func TestCSIDriverPassesCSISanityAndPublishesMounts(t *testing.T) {
	fuseOK(t)
	goTestModule(t, "../cmd/corgifs-csi", ".", "CORGIFS_BIN="+bin)
}

// TestKubernetesManifestsDecodeStrictlyAsAPITypes runs the module that
// checks deploy/kubernetes against the k8s.io/api types.
func TestKubernetesManifestsDecodeStrictlyAsAPITypes(t *testing.T) {
	goTestModule(t, "../deploy/kubernetes", ".")
}

// TestOCIImageRunsInPodmanAndServesTheHost builds the release's OCI image
// for this machine (no base image: static binaries only), inspects it
// with skopeo, unpacks it with umoci and runs its binary from the
// unpacked root with an OCI runtime, then loads it into podman and runs
// `corgifs mount` in a container with /dev/fuse, whose mount reaches the
// host through a shared bind mount: the host reads every byte of an epoch
// through it, and stopping the container unmounts it. Then it runs the
// image's CSI driver in a container as the DaemonSet does and publishes a
// volume through it (the driver module's publish test, from the host).
func TestOCIImageRunsInPodmanAndServesTheHost(t *testing.T) {
	fuseOK(t)
	if os.Geteuid() != 0 {
		testenv.Missing(t, "podman with /dev/fuse and a shared bind mount needs root")
	}
	for _, tool := range []string{"podman", "skopeo", "umoci", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, "%s is not installed (Debian: apt-get install podman runc crun skopeo umoci)", tool)
		}
	}
	testenv.LockMachine(t) // the image tag is the machine's: another copy of the suite removes it
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	dist := t.TempDir()
	build := exec.CommandContext(ctx, "go", "run", ".", "-out", dist, "-arch", runtime.GOARCH, "-deb=false")
	build.Dir = "../release"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("release builder: %v\n%s", err, out)
	}
	images, _ := filepath.Glob(filepath.Join(dist, "*.oci.tar"))
	if len(images) != 1 {
		t.Fatalf("release builder wrote %v, want one .oci.tar", images)
	}
	archive := images[0]

	// skopeo reads the image as a registry client would.
	var inspect struct {
		Architecture, Os string
		Labels           map[string]string
		Layers           []string
	}
	if err := json.Unmarshal([]byte(run("skopeo", "inspect", "oci-archive:"+archive)), &inspect); err != nil {
		t.Fatal(err)
	}
	if inspect.Architecture != runtime.GOARCH || inspect.Os != "linux" || len(inspect.Layers) != 1 || inspect.Labels["org.opencontainers.image.licenses"] != "Apache-2.0" {
		t.Errorf("skopeo inspect: %+v, want linux/%s, one layer, the license label", inspect, runtime.GOARCH)
	}

	// umoci unpacks it into a runtime bundle: its root holds the static
	// binaries and nothing that needs a C library.
	layout := filepath.Join(t.TempDir(), "layout")
	run("mkdir", "-p", layout)
	run("tar", "-xf", archive, "-C", layout)
	ref := strings.TrimSpace(run("umoci", "ls", "--layout", layout))
	bundle := filepath.Join(t.TempDir(), "bundle")
	run("umoci", "unpack", "--image", layout+":"+ref, bundle)
	for _, b := range []string{"corgifs", "corgifs-csi"} {
		f, err := elf.Open(filepath.Join(bundle, "rootfs", "usr", "bin", b))
		if err != nil {
			t.Fatalf("the image's /usr/bin/%s: %v", b, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("the image's /usr/bin/%s is dynamically linked: no base image provides its loader", b)
			}
		}
		f.Close()
	}
	runtimeName := ociRuntime(t, ctx, bundle)

	// podman: load the archive, serve a mount from a container.
	loaded := run("podman", "load", "-i", archive)
	if !strings.Contains(loaded, ref) {
		t.Fatalf("podman load: %s, want %s", loaded, ref)
	}
	t.Cleanup(func() { exec.Command("podman", "rmi", "-f", ref).Run() })
	data := filepath.Join(t.TempDir(), "data")
	corgifs(t, "gen", "synthetic", data, "--records", "2000", "--files", "4", "--features", "8")
	mnt := filepath.Join(t.TempDir(), "mnt")
	run("mkdir", mnt)
	// A shared mount point, so that the container's FUSE mount under it
	// propagates back to the host (as the DaemonSet's Bidirectional
	// mount of /var/lib/kubelet does).
	run("mount", "--bind", mnt, mnt)
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	run("mount", "--make-shared", mnt)
	name := fmt.Sprintf("corgifs-test-%d", os.Getpid())
	t.Cleanup(func() { exec.Command("podman", "rm", "-f", name).Run() })
	run("podman", append(podmanRuntime(runtimeName), "run", "-d", "--name", name,
		// Lower than this machine's limits: a container may not raise them
		// without CAP_SYS_RESOURCE, which the test's sandbox lacks.
		"--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096",
		"--device", "/dev/fuse", "--cap-add", "SYS_ADMIN",
		"-v", data+":/data:ro", "-v", mnt+":/mnt:rshared",
		ref, "mount", "--parts", "2", "--seed", "7", "/data", "/mnt")...)
	deadline := time.Now().Add(time.Minute)
	for !mountedCorgifs(mnt) {
		if time.Now().After(deadline) {
			logs, _ := exec.Command("podman", "logs", name).CombinedOutput()
			t.Fatalf("the container's mount did not reach the host at %s in a minute; its log:\n%s", mnt, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	parts, _ := filepath.Glob(filepath.Join(mnt, "epoch-0000", "*"))
	var served int64
	for _, p := range parts {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("the host reads %s: %v", p, err)
		}
		served += int64(len(b))
	}
	var stored int64
	files, _ := filepath.Glob(filepath.Join(data, "*"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() {
			stored += fi.Size()
		}
	}
	if len(parts) != 2 || served != stored {
		t.Errorf("the host read %d parts, %d bytes, through the container's mount; want 2 parts and the dataset's %d bytes", len(parts), served, stored)
	}
	run("podman", append(podmanRuntime(runtimeName), "stop", "-t", "20", name)...)
	if mountedCorgifs(mnt) {
		t.Errorf("%s is still a corgifs mount after podman stop", mnt)
	}
	csiDriverInContainer(t, ctx, ref, runtimeName, data)
	t.Logf("image %s (%s): inspected with skopeo, unpacked with umoci, run with %s; podman served a mount the host read (%d bytes); its corgifs-csi published a volume", ref, filepath.Base(archive), runtimeName, served)
}

// ociRuntime runs the unpacked image's `corgifs --version` with crun,
// else runc, and returns the one that ran it. crun refuses a machine
// whose cgroups are mounted in hybrid mode (v1 controllers and a v2
// unified tree), as this one's are; runc runs there.
func ociRuntime(t *testing.T, ctx context.Context, bundle string) string {
	t.Helper()
	cfgPath := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	proc := cfg["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = []string{"/usr/bin/corgifs", "--version"}
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var failures []string
	for _, rt := range []string{"crun", "runc"} {
		if _, err := exec.LookPath(rt); err != nil {
			failures = append(failures, rt+": not installed")
			continue
		}
		cmd := exec.CommandContext(ctx, rt, "run", "--bundle", bundle, fmt.Sprintf("corgifs-test-%s-%d", rt, os.Getpid()))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if err == nil && strings.Contains(out.String(), "corgifs v") {
			t.Logf("%s ran the unpacked image: %s", rt, strings.TrimSpace(out.String()))
			return rt
		}
		failures = append(failures, rt+": "+strings.TrimSpace(out.String()))
		t.Logf("%s could not run the unpacked image (%v): %s", rt, err, strings.TrimSpace(out.String()))
	}
	testenv.Missing(t, "no OCI runtime ran the unpacked image: %s", strings.Join(failures, "; "))
	return ""
}

func podmanRuntime(rt string) []string {
	return []string{"--runtime", rt}
}

func mountedCorgifs(mnt string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 7 && f[4] == mnt && strings.Contains(line, " - fuse.corgifs ") {
			return true
		}
	}
	return false
}

// csiDriverInContainer runs /usr/bin/corgifs-csi of the image ref as the
// DaemonSet's container (its socket in a host directory, a kubelet-like
// directory shared both ways, /dev/fuse) and runs the driver module's
// publish test against it from the host.
func csiDriverInContainer(t *testing.T, ctx context.Context, ref, runtimeName, data string) {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "csi") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	kubelet := filepath.Join(t.TempDir(), "kubelet")
	for _, args := range [][]string{{"mkdir", kubelet}, {"mount", "--bind", kubelet, kubelet}, {"mount", "--make-shared", kubelet}} {
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { exec.Command("umount", "-l", kubelet).Run() })
	name := fmt.Sprintf("corgifs-csi-test-%d", os.Getpid())
	t.Cleanup(func() { exec.Command("podman", "rm", "-f", name).Run() })
	args := append(podmanRuntime(runtimeName), "run", "-d", "--name", name,
		"--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096",
		"--device", "/dev/fuse", "--cap-add", "SYS_ADMIN",
		"-v", sockDir+":/csi", "-v", kubelet+":"+kubelet+":rshared", "-v", data+":"+data+":ro",
		"--entrypoint", "/usr/bin/corgifs-csi", ref,
		"--endpoint=unix:///csi/csi.sock", "--node-id=test-node", "--corgifs=/usr/bin/corgifs", "--state-dir=/tmp/state")
	if out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput(); err != nil {
		t.Fatalf("podman run corgifs-csi: %v\n%s", err, out)
	}
	sock := filepath.Join(sockDir, "csi.sock")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			logs, _ := exec.Command("podman", "logs", name).CombinedOutput()
			t.Fatalf("the driver in the container did not create %s; its log:\n%s", sock, logs)
		}
	}
	goTestModule(t, "../cmd/corgifs-csi", "^TestNodePublishServesDatasetAndUnpublishRemovesIt$",
		"CORGIFS_CSI_ENDPOINT=unix://"+sock, "CORGIFS_CSI_SOURCE="+data, "CORGIFS_CSI_TARGET_DIR="+kubelet)
	logs, _ := exec.Command("podman", "logs", name).CombinedOutput()
	t.Logf("corgifs-csi in the container:\n%s", logs)
	if out, err := exec.CommandContext(ctx, "podman", append(podmanRuntime(runtimeName), "stop", "-t", "20", name)...).CombinedOutput(); err != nil {
		t.Errorf("podman stop corgifs-csi: %v\n%s", err, out)
	}
}
