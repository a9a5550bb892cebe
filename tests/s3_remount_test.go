package tests

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/minio/minio-go/v7"
)

// objectGETs is an HTTP proxy in front of an S3 server that counts the
// GETs of each object (path style: /bucket/key) and of each bucket's
// listing pages (/bucket).
type objectGETs struct {
	srv  *httptest.Server
	mu   sync.Mutex
	gets map[string]int
}

func startObjectGETs(t *testing.T, target string) *objectGETs {
	t.Helper()
	u, err := url.Parse("http://" + target)
	if err != nil {
		t.Fatal(err)
	}
	g := &objectGETs{gets: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := strings.Trim(r.URL.Path, "/"); r.Method == http.MethodGet && p != "" {
			g.mu.Lock()
			g.gets[p]++
			g.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

// take returns the counts so far and starts again from zero.
func (g *objectGETs) take() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	got := maps.Clone(g.gets)
	clear(g.gets)
	return got
}

// An object replaced while a mount is up gives EIO for its blocks; the
// next mount with the same cache directory indexes that object alone (by
// the GETs the server sees, one object's and no other's) rather than the
// whole dataset, and serves the bytes of a local mount of the new files.
func TestS3ObjectReplacedDuringAMountIsTheOnlyOneIndexedAgainAtTheNextMount(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 2000, 16, 4, 3, "clustered")
	s.upload("data", "swap", src)
	g := startObjectGETs(t, s.addr)
	cache := filepath.Join(t.TempDir(), "cache")
	flags := []string{"--seed", "21", "--block-size", "16KiB"}
	remoteFlags := append(flags[:len(flags):len(flags)], "--s3-endpoint", g.srv.URL, "--cache-dir", cache)
	remote := startMount(t, "s3://data/swap", remoteFlags...)

	names, err := filepath.Glob(filepath.Join(src, "*.tfrecord"))
	if err != nil || len(names) != 3 {
		t.Fatalf("source files %v, %v", names, err)
	}
	replaced := filepath.Base(names[1])
	others, _ := filepath.Glob(filepath.Join(genSynthetic(t, 600, 16, 4, 1, "clustered"), "*.tfrecord"))
	b, err := os.ReadFile(others[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(names[1], b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.PutObject(context.Background(), "data", "swap/"+replaced, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(remote.part(0, 0, 1)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a part whose object was replaced: %v, want EIO", err)
	}
	remote.stop()

	g.take()
	remote = startMount(t, "s3://data/swap", remoteFlags...)
	gets := g.take()
	for _, n := range names {
		key := "data/swap/" + filepath.Base(n)
		if filepath.Base(n) == replaced {
			if gets[key] == 0 {
				t.Fatalf("the remount made no GET of the replaced %s: GETs %v", key, gets)
			}
		} else if gets[key] != 0 {
			t.Fatalf("the remount read unchanged %s again (%d GETs; all: %v): the whole dataset was indexed again\n%s", key, gets[key], gets, remote.log.String())
		}
	}
	if log, ok := remote.logHas("probing the changed files alone"); !ok || strings.Contains(log, "kept its") {
		t.Fatalf("the remount's log does not say the changed file alone is probed again:\n%s", log)
	}
	local := startMount(t, src, flags...)
	if !bytes.Equal(remote.read(0, 0, 1), local.read(0, 0, 1)) {
		t.Fatal("after the remount, epoch 0 differs from a local mount of the new files")
	}
}
