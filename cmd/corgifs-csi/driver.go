package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// mountType is how a corgifs mount shows in /proc/self/mountinfo.
const mountType = "fuse.corgifs"

// sourceAttr is the volume attribute that names the dataset: a local
// directory (a hostPath the driver's pod mounts) or s3://bucket/prefix.
const sourceAttr = "source"

// mountFlags are the volume attributes passed to `corgifs mount` as
// --NAME=VALUE: the dataset and order settings a PV may choose. Others
// (--cache-dir, --log-file, --background, --allow-other) are the
// driver's to set.
var mountFlags = []string{
	"strategy", "seed", "parts", "epochs", "equal-parts", "partition", "exchange",
	"block-size", "buffer", "max-memory", "prefetch",
	"disk-cache", "disk-cache-size",
	"format", "index", "include", "compression", "skip-corrupt", "follow-symlinks", "direct-io",
	"header", "record-size", "header-bytes",
	"s3-endpoint", "s3-region", "s3-path-style", "s3-concurrency", "s3-timeout",
	"feedback-dim", "feedback-timeout", "balance-rule",
}

// secretEnv are the secret keys passed to the daemon as environment
// variables: S3 credentials and where the store is.
var secretEnv = []string{
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
	"AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
}

type config struct {
	nodeID       string
	corgifs      string
	stateDir     string
	readyTimeout time.Duration
}

// driver serves the CSI Identity and Node services.
type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	cfg config
	log *slog.Logger

	mu      sync.Mutex
	daemons map[string]*daemon // by target path
	busy    map[string]bool    // target paths with a call in progress
}

// daemon is one corgifs mount process the driver started.
type daemon struct {
	volumeID string
	args     []string // what it was started with, to tell a compatible republish
	cmd      *exec.Cmd
	exited   chan struct{} // closed once cmd.Wait returned
	logPath  string
	logStart int64 // the log's size when it started: what it logged since is its own
	started  time.Time
}

func newDriver(cfg config, log *slog.Logger) *driver {
	return &driver{cfg: cfg, log: log, daemons: make(map[string]*daemon), busy: make(map[string]bool)}
}

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: driverName, VendorVersion: version}, nil
}

// GetPluginCapabilities lists no controller service: volumes are
// provisioned statically (a PV names its dataset), so there is nothing to
// create, attach or delete.
func (d *driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

func (d *driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

func (d *driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.cfg.nodeID}, nil
}

// NodeGetCapabilities lists none: no staging (each pod's mount is its own
// daemon, with its own parts and seed), no stats, no expansion.
func (d *driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

// NodePublishVolume mounts the volume's source at the target path with a
// corgifs daemon and returns once the mount serves. Publishing the same
// volume with the same attributes at the same path again succeeds and
// changes nothing; another volume or other attributes there is
// AlreadyExists.
func (d *driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target := req.GetTargetPath()
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "NodePublishVolume: volume_id is empty")
	case target == "":
		return nil, status.Error(codes.InvalidArgument, "NodePublishVolume: target_path is empty")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "NodePublishVolume: volume_capability is missing")
	case req.GetVolumeCapability().GetBlock() != nil:
		return nil, status.Error(codes.InvalidArgument, "NodePublishVolume: corgifs volumes are file systems; use volumeMode: Filesystem, not Block")
	}
	args, err := d.mountArgs(req.GetVolumeContext(), target, req.GetVolumeId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "NodePublishVolume %s: %v", req.GetVolumeId(), err)
	}
	env, err := daemonEnv(req.GetSecrets())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "NodePublishVolume %s: %v", req.GetVolumeId(), err)
	}

	d.mu.Lock()
	if d.busy[target] {
		d.mu.Unlock()
		return nil, status.Errorf(codes.Aborted, "NodePublishVolume %s: another call on %s is in progress", req.GetVolumeId(), target)
	}
	dm := d.daemons[target]
	crashed := dm != nil && !dm.running() // its mount, if any, is dead
	if crashed {
		delete(d.daemons, target)
		dm = nil
	}
	if dm != nil && (dm.volumeID != req.GetVolumeId() || !slices.Equal(dm.args, args)) {
		d.mu.Unlock()
		return nil, status.Errorf(codes.AlreadyExists, "NodePublishVolume: %s already serves volume %s with %q; unpublish it first", target, dm.volumeID, dm.args)
	}
	d.busy[target] = true
	d.mu.Unlock()
	defer d.done(target)

	if dm == nil {
		typ, err := mountTypeAt(target)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "NodePublishVolume %s: %v", req.GetVolumeId(), err)
		}
		switch typ {
		case "":
		case mountType:
			if crashed {
				// "Transport endpoint is not connected" for the pod:
				// detach it and serve again.
				if err := syscall.Unmount(target, syscall.MNT_DETACH); err != nil {
					return nil, status.Errorf(codes.Internal, "NodePublishVolume %s: unmount the mount of the daemon that exited at %s: %v", req.GetVolumeId(), target, err)
				}
				break
			}
			// A mount of a daemon started by an earlier driver process: the
			// volume it serves is not known, trust the kubelet's retry.
			return &csi.NodePublishVolumeResponse{}, nil
		default:
			return nil, status.Errorf(codes.AlreadyExists, "NodePublishVolume %s: %s is already a %s mount", req.GetVolumeId(), target, typ)
		}
		if err := os.MkdirAll(target, 0o750); err != nil {
			return nil, status.Errorf(codes.Internal, "NodePublishVolume %s: create the target: %v", req.GetVolumeId(), err)
		}
		if dm, err = d.start(req.GetVolumeId(), target, args, env); err != nil {
			return nil, err
		}
		d.mu.Lock()
		d.daemons[target] = dm
		d.mu.Unlock()
	}
	// A daemon that is still indexing when the call's deadline comes keeps
	// going: the kubelet's retry, same volume and attributes, waits for it
	// here rather than starting over.
	if err := d.waitReady(ctx, dm, target); err != nil {
		if !dm.running() {
			d.mu.Lock()
			if d.daemons[target] == dm {
				delete(d.daemons, target)
			}
			d.mu.Unlock()
		}
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// done ends the call in progress on target.
func (d *driver) done(target string) {
	d.mu.Lock()
	delete(d.busy, target)
	d.mu.Unlock()
}

// NodeUnpublishVolume stops the daemon serving the target path, unmounts
// it and removes the directory. A path that is gone already succeeds.
func (d *driver) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "NodeUnpublishVolume: volume_id is empty")
	case target == "":
		return nil, status.Error(codes.InvalidArgument, "NodeUnpublishVolume: target_path is empty")
	}
	d.mu.Lock()
	if d.busy[target] {
		d.mu.Unlock()
		return nil, status.Errorf(codes.Aborted, "NodeUnpublishVolume %s: another call on %s is in progress", req.GetVolumeId(), target)
	}
	dm := d.daemons[target]
	delete(d.daemons, target)
	d.busy[target] = true
	d.mu.Unlock()
	defer d.done(target)
	if dm != nil {
		dm.stop(d.log)
	}
	typ, err := mountTypeAt(target)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "NodeUnpublishVolume %s: %v", req.GetVolumeId(), err)
	}
	if typ != "" {
		// A daemon that would not stop, or one an earlier driver process
		// started: detach the mount; its daemon exits once the kernel
		// closes the connection.
		if err := syscall.Unmount(target, syscall.MNT_DETACH); err != nil {
			return nil, status.Errorf(codes.Internal, "NodeUnpublishVolume %s: unmount %s (%s): %v", req.GetVolumeId(), target, typ, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "NodeUnpublishVolume %s: remove the target: %v", req.GetVolumeId(), err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// mountArgs turns the volume attributes into `corgifs mount` arguments.
func (d *driver) mountArgs(attrs map[string]string, target, volumeID string) ([]string, error) {
	src := attrs[sourceAttr]
	if src == "" {
		return nil, fmt.Errorf("volume attribute %q is missing: set spec.csi.volumeAttributes.source of the PV to a directory on the node or s3://bucket/prefix", sourceAttr)
	}
	if strings.HasPrefix(src, "-") {
		// corgifs would take it for a flag.
		return nil, fmt.Errorf("volume attribute %s=%q starts with '-': want a directory on the node or s3://bucket/prefix", sourceAttr, src)
	}
	args := []string{"mount",
		// Pods run as any user: let them read (the daemon runs as root,
		// which needs no user_allow_other in /etc/fuse.conf).
		"--allow-other",
		"--cache-dir=" + filepath.Join(d.cfg.stateDir, "cache"),
	}
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		switch {
		case k == sourceAttr:
		case strings.HasPrefix(k, "csi.storage.k8s.io/"): // the kubelet's pod information, not ours
		case slices.Contains(mountFlags, k):
			args = append(args, "--"+k+"="+attrs[k])
		default:
			return nil, fmt.Errorf("unknown volume attribute %q; valid: %s, %s", k, sourceAttr, strings.Join(mountFlags, ", "))
		}
	}
	return append(args, src, target), nil
}

// daemonEnv is the driver's environment with the secret's credentials.
func daemonEnv(secrets map[string]string) ([]string, error) {
	env := os.Environ()
	for _, k := range slices.Sorted(maps.Keys(secrets)) {
		if !slices.Contains(secretEnv, k) {
			return nil, fmt.Errorf("unknown key %q in the node-publish secret; valid: %s", k, strings.Join(secretEnv, ", "))
		}
		env = append(env, k+"="+secrets[k])
	}
	return env, nil
}

// start runs `corgifs mount` in the foreground as a child in a session of
// its own.
func (d *driver) start(volumeID, target string, args, env []string) (*daemon, error) {
	logDir := filepath.Join(d.cfg.stateDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, status.Errorf(codes.Internal, "NodePublishVolume %s: %v", volumeID, err)
	}
	logPath := filepath.Join(logDir, logName(volumeID, target))
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "NodePublishVolume %s: %v", volumeID, err)
	}
	defer logf.Close() // the child has its own copy
	logStart, _ := logf.Seek(0, io.SeekEnd)
	cmd := exec.Command(d.cfg.corgifs, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: a signal to the driver's process group does not
	// take the pods' volumes down with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, status.Errorf(codes.Internal, "NodePublishVolume %s: start %s: %v", volumeID, d.cfg.corgifs, err)
	}
	dm := &daemon{volumeID: volumeID, args: args, cmd: cmd, exited: make(chan struct{}), logPath: logPath, logStart: logStart, started: time.Now()}
	go func() {
		cmd.Wait() // the exit status is in the log
		close(dm.exited)
	}()
	d.log.Info("mounting", "volume", volumeID, "target", target, "pid", cmd.Process.Pid, "args", args, "log", logPath)
	return dm, nil
}

// waitReady returns once dm's mount shows at target. If the daemon exits
// first, or has not mounted --mount-timeout after it started (then it is
// stopped), the error has its last log lines. When ctx ends first the
// daemon keeps running for the next call.
func (d *driver) waitReady(ctx context.Context, dm *daemon, target string) error {
	src := dm.args[len(dm.args)-2]
	deadline := time.NewTimer(time.Until(dm.started.Add(d.cfg.readyTimeout)))
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if typ, err := mountTypeAt(target); err == nil && typ == mountType {
			return nil
		}
		select {
		case <-dm.exited:
			return status.Errorf(codes.Internal, "NodePublishVolume %s: corgifs mount of %s at %s exited (%v): %s (log: %s)",
				dm.volumeID, src, target, dm.cmd.ProcessState, logTail(dm.logPath, dm.logStart), dm.logPath)
		case <-ctx.Done():
			return status.Errorf(codes.DeadlineExceeded, "NodePublishVolume %s: the mount of %s at %s is not ready yet (indexing?); it keeps starting and the next call waits for it (log: %s)",
				dm.volumeID, src, target, dm.logPath)
		case <-deadline.C:
			dm.stop(d.log)
			return status.Errorf(codes.DeadlineExceeded, "NodePublishVolume %s: the mount of %s at %s was not ready %v after it started (--mount-timeout); stopped it: %s (log: %s)",
				dm.volumeID, src, target, d.cfg.readyTimeout, logTail(dm.logPath, dm.logStart), dm.logPath)
		case <-tick.C:
		}
	}
}

func (dm *daemon) running() bool {
	select {
	case <-dm.exited:
		return false
	default:
		return true
	}
}

// stop asks the daemon to unmount and exit (SIGTERM), then kills it if
// it has not after 10 s.
func (dm *daemon) stop(log *slog.Logger) {
	if !dm.running() {
		return
	}
	dm.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-dm.exited:
		return
	case <-time.After(10 * time.Second):
	}
	log.Warn("daemon did not exit 10 s after SIGTERM; killing it", "pid", dm.cmd.Process.Pid, "volume", dm.volumeID, "log", dm.logPath)
	dm.cmd.Process.Kill()
	<-dm.exited
}

// logName is a file name for the log of volumeID mounted at target: a
// volume may be mounted by several pods of the node.
func logName(volumeID, target string) string {
	h := sha256.Sum256([]byte(target))
	safe := strings.Map(func(r rune) rune {
		if r == '/' || r == 0 {
			return '_'
		}
		return r
	}, volumeID)
	return safe + "-" + hex.EncodeToString(h[:4]) + ".log"
}

// logTail is what the daemon logged since offset start, at most its last
// 2 KiB, on one line.
func logTail(path string, start int64) string {
	b, err := os.ReadFile(path)
	if err != nil || start > int64(len(b)) {
		return "(no log)"
	}
	b = bytes.TrimSpace(b[start:])
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return strings.ReplaceAll(string(b), "\n", " | ")
}

// mountTypeAt is the file system type of the mount whose mount point is
// path ("" if none), from /proc/self/mountinfo; the last one wins, as
// the top of a stack of mounts is what a pod sees.
func mountTypeAt(path string) (string, error) {
	path = filepath.Clean(path)
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	typ := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 || unescapeMountinfo(fields[4]) != path {
			continue
		}
		for i := 6; i < len(fields)-1; i++ {
			if fields[i] == "-" {
				typ = fields[i+1]
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read /proc/self/mountinfo: %w", err)
	}
	return typ, nil
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
