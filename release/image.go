package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// imageRepo is the image's name in the manifests of deploy/kubernetes.
const imageRepo = "ghcr.io/corgifs/corgifs"

// buildImage writes NAME.oci.tar: an OCI image layout in a tar (what
// `podman load`, `skopeo copy oci-archive:` and `docker load` read) with
// one image for linux/arch whose only layer holds the static binaries
// /usr/bin/corgifs and /usr/bin/corgifs-csi. There is no base image: the
// binaries need no C library, and as root corgifs mounts with mount(2)
// itself (go-fuse's DirectMount), so no fusermount3 either. Its bytes
// depend only on the binaries and the source date.
func buildImage(ctx context.Context, c config, arch, dir string, log *slog.Logger) (string, error) {
	csiBin, err := buildCSI(ctx, c, arch, log)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(filepath.Dir(csiBin))

	// The layer: a tar with fixed times, owners and order.
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	dirs := []struct {
		name string
		mode int64
	}{{"usr/", 0o755}, {"usr/bin/", 0o755}, {"tmp/", 0o1777}, {"var/", 0o755}, {"var/lib/", 0o755}}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.name, Mode: d.mode, ModTime: c.date, Format: tar.FormatPAX}); err != nil {
			return "", err
		}
	}
	for _, f := range []struct{ from, name string }{
		{filepath.Join(dir, "corgifs"), "usr/bin/corgifs"},
		{csiBin, "usr/bin/corgifs-csi"},
	} {
		b, err := os.ReadFile(f.from)
		if err != nil {
			return "", err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o755, Size: int64(len(b)), ModTime: c.date, Format: tar.FormatPAX}); err != nil {
			return "", err
		}
		if _, err := tw.Write(b); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	diffID := digest.FromBytes(layer.Bytes())
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz) // no name, no time in the header
	if _, err := zw.Write(layer.Bytes()); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}

	created := c.date
	labels := map[string]string{
		v1.AnnotationVersion:  c.version,
		v1.AnnotationRevision: c.commit,
		v1.AnnotationLicenses: "Apache-2.0",
		v1.AnnotationTitle:    "corgifs",
		v1.AnnotationSource:   "https://github.com/corgifs/corgifs",
	}
	cfg := v1.Image{
		Created:  &created,
		Platform: v1.Platform{Architecture: arch, OS: "linux"},
		Config: v1.ImageConfig{
			Entrypoint: []string{"/usr/bin/corgifs"},
			Env:        []string{"PATH=/usr/bin:/bin", "HOME=/tmp"},
			Labels:     labels,
		},
		RootFS:  v1.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
		History: []v1.History{{Created: &created, CreatedBy: "corgifs release " + c.version, Comment: "static corgifs and corgifs-csi"}},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	manifest := v1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageManifest,
		Config:    v1.Descriptor{MediaType: v1.MediaTypeImageConfig, Digest: digest.FromBytes(cfgJSON), Size: int64(len(cfgJSON))},
		Layers:    []v1.Descriptor{{MediaType: v1.MediaTypeImageLayerGzip, Digest: digest.FromBytes(gz.Bytes()), Size: int64(gz.Len())}},
		Annotations: map[string]string{
			v1.AnnotationVersion:  c.version,
			v1.AnnotationRevision: c.commit,
			v1.AnnotationCreated:  created.Format(time.RFC3339),
		},
	}
	manJSON, err := json.Marshal(manifest)
	if err != nil {
		return "", err
	}
	index := v1.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: v1.MediaTypeImageManifest, Digest: digest.FromBytes(manJSON), Size: int64(len(manJSON)),
			Platform: &v1.Platform{Architecture: arch, OS: "linux"},
			// What podman and skopeo name the image on load.
			Annotations: map[string]string{v1.AnnotationRefName: imageRepo + ":" + c.version},
		}},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return "", err
	}
	layoutJSON, err := json.Marshal(v1.ImageLayout{Version: v1.ImageLayoutVersion})
	if err != nil {
		return "", err
	}

	path := filepath.Join(c.out, c.name(arch)+".oci.tar")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	ow := tar.NewWriter(f)
	entries := []struct {
		name string
		data []byte
	}{
		{v1.ImageLayoutFile, layoutJSON},
		{v1.ImageIndexFile, indexJSON},
		{blobPath(digest.FromBytes(cfgJSON)), cfgJSON},
		{blobPath(digest.FromBytes(gz.Bytes())), gz.Bytes()},
		{blobPath(digest.FromBytes(manJSON)), manJSON},
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := ow.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: c.date, Format: tar.FormatPAX}); err != nil {
			f.Close()
			return "", err
		}
	}
	for _, e := range entries {
		if err := ow.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: c.date, Format: tar.FormatPAX}); err != nil {
			f.Close()
			return "", err
		}
		if _, err := ow.Write(e.data); err != nil {
			f.Close()
			return "", err
		}
	}
	if err := ow.Close(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return path, nil
}

func blobPath(d digest.Digest) string {
	return "blobs/" + d.Algorithm().String() + "/" + d.Encoded()
}

// buildCSI builds the CSI node driver, a module of its own in
// cmd/corgifs-csi, for linux/arch into a temporary directory.
func buildCSI(ctx context.Context, c config, arch string, log *slog.Logger) (string, error) {
	tmp, err := os.MkdirTemp("", "corgifs-csi")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(tmp, "corgifs-csi")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w -buildid=", "-o", bin, ".")
	cmd.Dir = filepath.Join(c.root, "cmd", "corgifs-csi")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=", "GOAMD64=v1", "GOARM64=v8.0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	log.Info("go build", "binary", "corgifs-csi", "arch", arch)
	if err := cmd.Run(); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("go build ./cmd/corgifs-csi for linux/%s: %w", arch, err)
	}
	return bin, nil
}
