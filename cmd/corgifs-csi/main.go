// Command corgifs-csi is a Container Storage Interface node driver that
// gives a Kubernetes pod a corgifs mount as a volume: NodePublishVolume
// starts a corgifs daemon serving the volume's source at the pod's target
// path, NodeUnpublishVolume unmounts it and stops the daemon.
//
// It is a module of its own so that gRPC and the CSI bindings stay out of
// the corgifs daemon's module (and its go.sum), as release/ keeps nfpm
// out: the driver only runs the corgifs binary, it imports none of its
// packages.
//
// Usage:
//
//	corgifs-csi --endpoint unix:///csi/csi.sock --node-id $(NODE_NAME)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

// driverName is the CSI driver's name: the CSIDriver object's name and
// the PV's spec.csi.driver.
const driverName = "corgifs.csi.corgifs.dev"

// version is the driver's version, reported by GetPluginInfo.
const version = "0.1.0"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "corgifs-csi:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fset := flag.NewFlagSet("corgifs-csi", flag.ContinueOnError)
	var cfg config
	endpoint := fset.String("endpoint", "unix:///csi/csi.sock", "gRPC `endpoint` the kubelet (through node-driver-registrar) calls: unix:///path or a path")
	fset.StringVar(&cfg.nodeID, "node-id", "", "this node's `name` (the DaemonSet passes spec.nodeName); default: the host name")
	fset.StringVar(&cfg.corgifs, "corgifs", "corgifs", "the corgifs `binary` the driver starts, a path or a name on PATH")
	fset.StringVar(&cfg.stateDir, "state-dir", "/var/lib/corgifs-csi", "`dir`ectory of the daemons' index caches (cache/) and logs (logs/VOLUME.log); a host path, so that an index survives the driver's restart")
	fset.DurationVar(&cfg.readyTimeout, "mount-timeout", 5*time.Minute, "how long NodePublishVolume waits for a mount to serve (a full index of a large local source takes a while)")
	debug := fset.Bool("debug", false, "log every call")
	if err := fset.Parse(args); err != nil {
		return err
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if cfg.nodeID == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--node-id not given and no host name: %w", err)
		}
		cfg.nodeID = h
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, *endpoint, newDriver(cfg, log), log)
}

// serve answers CSI calls on endpoint until ctx ends. The daemons it
// started keep serving their mounts: a driver restart must not take the
// pods' volumes away (a new driver unpublishes them by their mounts).
func serve(ctx context.Context, endpoint string, d *driver, log *slog.Logger) error {
	path, err := socketPath(endpoint)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("endpoint %s: %w", endpoint, err)
	}
	// A socket left by a previous driver would make Listen fail.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("endpoint %s: remove the old socket: %w", endpoint, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("endpoint %s: %w", endpoint, err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		log.Debug("call", "method", info.FullMethod)
		resp, err := h(ctx, req)
		if err != nil {
			log.Warn("call failed", "method", info.FullMethod, "err", err)
		}
		return resp, err
	}))
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterNodeServer(srv, d)
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	log.Info("serving", "driver", driverName, "endpoint", path, "node", d.cfg.nodeID)
	if err := srv.Serve(lis); err != nil {
		return fmt.Errorf("endpoint %s: %w", endpoint, err)
	}
	return nil
}

// socketPath accepts unix:///path, unix:/path and a bare path.
func socketPath(endpoint string) (string, error) {
	if !strings.Contains(endpoint, "://") && !strings.HasPrefix(endpoint, "unix:") {
		return endpoint, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "unix" {
		return "", fmt.Errorf("endpoint %q: want unix:///path/to/csi.sock", endpoint)
	}
	if u.Path != "" {
		return u.Path, nil
	}
	return u.Opaque, nil
}
