package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// missing skips t, or fails it under CI=true, where .ci/run installs every
// component (the rule of the main module's internal/testenv, which this
// module cannot import).
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("missing under CI=true (.ci/run must install it): "+format, args...)
	}
	t.Skipf(format, args...)
}

// corgifsBinary is $CORGIFS_BIN, or the daemon built from this tree.
func corgifsBinary(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "the driver mounts as root (DirectMount): run the test as root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		missing(t, "/dev/fuse: %v", err)
	}
	if bin := os.Getenv("CORGIFS_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "corgifs")
	out, err := exec.Command("go", "build", "-C", "../..", "-o", bin, "./cmd/corgifs").CombinedOutput()
	if err != nil {
		t.Fatalf("build corgifs: %v\n%s", err, out)
	}
	return bin
}

// dataset writes a small synthetic TFRecord dataset.
func dataset(t *testing.T, bin string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	out, err := exec.Command(bin, "gen", "synthetic", dir, "--records", "2000", "--files", "4", "--features", "8").CombinedOutput()
	if err != nil {
		t.Fatalf("corgifs gen synthetic: %v\n%s", err, out)
	}
	return dir
}

// startDriver serves the driver on a unix socket, as in the DaemonSet,
// and returns its endpoint and the driver.
func startDriver(t *testing.T, bin string) (string, *driver) {
	t.Helper()
	// A short path: a unix socket's is limited to 107 bytes.
	dir, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	endpoint := "unix://" + filepath.Join(dir, "csi.sock")
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	d := newDriver(config{nodeID: "node-1", corgifs: bin, stateDir: filepath.Join(dir, "state"), readyTimeout: time.Minute}, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, endpoint, d, log) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		// Whatever a failed test left mounted.
		d.mu.Lock()
		for target, dm := range d.daemons {
			dm.stop(log)
			exec.Command("umount", "-l", target).Run()
		}
		d.mu.Unlock()
	})
	sock := strings.TrimPrefix(endpoint, "unix://")
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if i == 100 {
			t.Fatalf("the driver did not create %s", sock)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return endpoint, d
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestCSISanityNodeAndIdentity runs the upstream conformance suite of
// kubernetes-csi/csi-test (the package the csi-sanity command wraps)
// against the driver on a unix socket, with a volume context naming a
// local dataset. The driver has no controller service (volumes are
// provisioned statically), so the specs of the controller, group
// controller and snapshot services are skipped, and so is the one node
// spec that creates its volume through CreateVolume ("should remove
// target path"); TestNodePublishServesDatasetAndUnpublishRemovesIt checks
// that property with a published volume.
// TestCSISanityCommandPassesAgainstTheDriverBinary runs the same suite
// through the csi-sanity command.
func TestCSISanityNodeAndIdentity(t *testing.T) {
	bin := corgifsBinary(t)
	endpoint, _ := startDriver(t, bin)
	cfg := sanity.NewTestConfig()
	cfg.Address = endpoint
	dir := t.TempDir()
	cfg.TargetPath = filepath.Join(dir, "mount")
	cfg.StagingPath = filepath.Join(dir, "staging")
	cfg.TestVolumeParameters = map[string]string{sourceAttr: dataset(t, bin)}
	sc := sanity.GinkgoTest(&cfg)
	gomega.RegisterFailHandler(ginkgo.Fail)
	suite, reporter := ginkgo.GinkgoConfiguration()
	suite.SkipStrings = []string{sanitySkip}
	reporter.Verbose = testing.Verbose()
	reporter.NoColor = true
	if !ginkgo.RunSpecs(t, "csi-sanity: corgifs-csi node driver", suite, reporter) {
		t.Error("csi-sanity failed (see above)")
	}
	sc.Finalize()
}

func dial(t *testing.T, endpoint string) (csi.NodeClient, csi.IdentityClient) {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return csi.NewNodeClient(conn), csi.NewIdentityClient(conn)
}

func mountCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
	}
}

// TestNodePublishServesDatasetAndUnpublishRemovesIt publishes a volume as
// the kubelet would (attributes from a PV, credentials from a secret),
// reads the served parts through the mount, checks that a repeated
// publish is idempotent and a conflicting one refused, and that
// unpublishing stops the daemon and removes the target path.
//
// With CORGIFS_CSI_ENDPOINT set, it publishes through that driver instead
// of one started here (tests/kubernetes_test.go runs the image's driver
// in a container): CORGIFS_CSI_SOURCE is then the dataset and
// CORGIFS_CSI_TARGET_DIR a directory whose mounts reach this process.
func TestNodePublishServesDatasetAndUnpublishRemovesIt(t *testing.T) {
	var (
		endpoint, src, base string
		d                   *driver // nil for a driver elsewhere
	)
	if endpoint = os.Getenv("CORGIFS_CSI_ENDPOINT"); endpoint != "" {
		src, base = os.Getenv("CORGIFS_CSI_SOURCE"), os.Getenv("CORGIFS_CSI_TARGET_DIR")
		if src == "" || base == "" {
			t.Fatal("CORGIFS_CSI_ENDPOINT needs CORGIFS_CSI_SOURCE and CORGIFS_CSI_TARGET_DIR")
		}
	} else {
		bin := corgifsBinary(t)
		src = dataset(t, bin)
		endpoint, d = startDriver(t, bin)
		base = t.TempDir()
	}
	node, _ := dial(t, endpoint)
	ctx := context.Background()
	target := filepath.Join(base, "pods", "uid", "volumes", "corgi", "mount")
	req := &csi.NodePublishVolumeRequest{
		VolumeId:         "corgi-train",
		TargetPath:       target,
		VolumeCapability: mountCap(),
		Readonly:         true,
		VolumeContext: map[string]string{
			sourceAttr: src, "strategy": "corgipile", "seed": "7", "parts": "2", "block-size": "64KiB", "buffer": "256KiB",
			"disk-cache":                       filepath.Join(base, "disk"),
			"csi.storage.k8s.io/pod.name":      "train-0", // what podInfoOnMount adds
			"csi.storage.k8s.io/pod.namespace": "default",
		},
		Secrets: map[string]string{"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "secret"},
	}
	if _, err := node.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}

	var conf struct {
		Parts int    `json:"parts"`
		Seed  uint64 `json:"seed"`
	}
	b, err := os.ReadFile(filepath.Join(target, ".corgifs", "config.json"))
	if err != nil {
		t.Fatalf("read the mount's config: %v", err)
	}
	if err := json.Unmarshal(b, &conf); err != nil || conf.Parts != 2 || conf.Seed != 7 {
		t.Fatalf("config.json = %+v (%v), want parts 2 and seed 7 from the volume attributes", conf, err)
	}
	parts, err := filepath.Glob(filepath.Join(target, "epoch-0000", "*"))
	if err != nil || len(parts) != 2 {
		t.Fatalf("epoch-0000 holds %v (%v), want 2 parts", parts, err)
	}
	var served int64
	for _, p := range parts {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("read %s through the mount: %v", p, err)
		}
		served += int64(len(b))
	}
	var stored int64
	filepath.Walk(src, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			stored += fi.Size()
		}
		return nil
	})
	if served != stored {
		t.Errorf("the parts of epoch 0 hold %d bytes, the dataset %d", served, stored)
	}

	var dm *daemon
	if d != nil {
		d.mu.Lock()
		dm = d.daemons[target]
		d.mu.Unlock()
		environ, err := os.ReadFile("/proc/" + strconv.Itoa(dm.cmd.Process.Pid) + "/environ")
		if err != nil || !bytes.Contains(environ, []byte("\x00AWS_ACCESS_KEY_ID=AKIDTEST\x00")) {
			t.Errorf("the daemon's environment lacks the secret's AWS_ACCESS_KEY_ID (%v)", err)
		}
	}

	if _, err := node.NodePublishVolume(ctx, req); err != nil {
		t.Errorf("NodePublishVolume again, same volume and attributes: %v, want success (idempotent)", err)
	}
	if dm != nil {
		// A daemon killed under a published volume leaves a dead mount;
		// the kubelet's next publish serves it again.
		dm.cmd.Process.Kill()
		<-dm.exited
		if _, err := node.NodePublishVolume(ctx, req); err != nil {
			t.Fatalf("NodePublishVolume after the daemon was killed: %v", err)
		}
		if _, err := os.ReadFile(filepath.Join(target, ".corgifs", "config.json")); err != nil {
			t.Errorf("the mount after republishing over a killed daemon: %v", err)
		}
		d.mu.Lock()
		dm = d.daemons[target]
		d.mu.Unlock()
	}
	other := &csi.NodePublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: target, VolumeCapability: mountCap(),
		VolumeContext: map[string]string{sourceAttr: src, "seed": "8"}}
	if _, err := node.NodePublishVolume(ctx, other); status.Code(err) != codes.AlreadyExists {
		t.Errorf("NodePublishVolume at the same path with another seed: %v, want AlreadyExists", err)
	}

	if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume: %v", err)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the target path after NodeUnpublishVolume: %v, want it removed", err)
	}
	if dm != nil {
		select {
		case <-dm.exited:
		default:
			t.Errorf("the daemon (pid %d) still runs after NodeUnpublishVolume", dm.cmd.Process.Pid)
		}
	}
	if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: target}); err != nil {
		t.Errorf("NodeUnpublishVolume again: %v, want success (idempotent)", err)
	}
}

// TestNodePublishErrorsNameTheCause checks that a bad volume is refused
// with what is wrong in it: an unknown attribute with the valid ones, a
// source that does not exist with the daemon's own error.
func TestNodePublishErrorsNameTheCause(t *testing.T) {
	bin := corgifsBinary(t)
	endpoint, _ := startDriver(t, bin)
	node, _ := dial(t, endpoint)
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "mount")
	req := &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, VolumeCapability: mountCap(),
		VolumeContext: map[string]string{sourceAttr: "/nonexistent/corgi", "stratgy": "corgipile"}}
	_, err := node.NodePublishVolume(ctx, req)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"stratgy"`) || !strings.Contains(err.Error(), "strategy") {
		t.Errorf("unknown attribute: %v, want InvalidArgument naming it and the valid ones", err)
	}
	req.VolumeContext = map[string]string{sourceAttr: "--debug"}
	if _, err = node.NodePublishVolume(ctx, req); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a source that looks like a flag: %v, want InvalidArgument", err)
	}
	req.VolumeContext = map[string]string{sourceAttr: "/nonexistent/corgi"}
	_, err = node.NodePublishVolume(ctx, req)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "/nonexistent/corgi") {
		t.Errorf("missing source: %v, want Internal with the daemon's error naming the source", err)
	}
	req.Secrets = map[string]string{"password": "x"}
	if _, err = node.NodePublishVolume(ctx, req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Errorf("unknown secret key: %v, want InvalidArgument listing the valid keys", err)
	}
	if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target}); err != nil {
		t.Errorf("NodeUnpublishVolume after a failed publish: %v", err)
	}
}
