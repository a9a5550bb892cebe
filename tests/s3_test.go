package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/corgifs/corgifs/internal/testenv"
)

// The S3 tests run a real S3 server, versitygw (a gateway that serves a
// directory through the S3 API), on 127.0.0.1; .ci/run installs it.

const (
	s3Access = "corgifs-test-access"
	s3Secret = "corgifs-test-secret-key"
)

// s3Server is a versitygw serving a fresh directory.
type s3Server struct {
	t        *testing.T
	gw, dir  string
	addr     string // host:port
	endpoint string // http://host:port
	client   *minio.Client
	cmd      *exec.Cmd
	log      syncBuffer
}

// startS3 starts versitygw on a free port of 127.0.0.1 and sets the AWS
// credentials of its root user in the environment, where corgifs finds
// them. It is stopped at the end of the test.
func startS3(t *testing.T) *s3Server {
	t.Helper()
	fuseOK(t)
	gw, err := exec.LookPath("versitygw")
	if err != nil {
		testenv.Missing(t, "no versitygw S3 server on PATH (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)")
	}
	s := &s3Server{t: t, gw: gw, dir: filepath.Join(t.TempDir(), "s3")}
	if err := os.Mkdir(s.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	s.endpoint = "http://" + s.addr
	l.Close()
	s.client, err = minio.New(s.addr, &minio.Options{Creds: credentials.NewStaticV4(s3Access, s3Secret, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	s.start()
	t.Cleanup(s.kill)
	t.Setenv("AWS_ACCESS_KEY_ID", s3Access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3Secret)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_REGION", "us-east-1")
	return s
}

// start starts the server and waits until it answers.
func (s *s3Server) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.gw, "--port", s.addr, "--access", s3Access, "--secret", s3Secret, "--quiet", "posix", s.dir)
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := s.client.ListBuckets(context.Background()); err == nil {
			return
		} else if time.Now().After(deadline) {
			s.t.Fatalf("versitygw did not answer: %v\n%s", err, s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill stops the server at once.
func (s *s3Server) kill() {
	if s.cmd != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

// upload creates bucket and puts every file of dir under prefix.
func (s *s3Server) upload(bucket, prefix, dir string) {
	s.t.Helper()
	ctx := context.Background()
	if err := s.client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		s.t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := s.client.FPutObject(ctx, bucket, prefix+"/"+e.Name(), filepath.Join(dir, e.Name()), minio.PutObjectOptions{}); err != nil {
			s.t.Fatal(err)
		}
	}
}

// readAll reads every part of epochs 0 and 1 for K = 1 and 3.
func readAll(t *testing.T, m *mount) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for epoch := range 2 {
		for _, k := range []int{1, 3} {
			for i := range k {
				out[fmt.Sprintf("%d/%d/%d", epoch, i, k)] = m.read(epoch, i, k)
			}
		}
	}
	return out
}

func TestS3MountServesTheSamePartsAsTheLocalDirectory(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 3000, 16, 4, 4, "clustered")
	s.upload("data", "train/set", src)
	want := sortedHashes(sourceRecords(t, src))
	for _, strategy := range []string{"corgipile", "full"} {
		t.Run(strategy, func(t *testing.T) {
			flags := []string{"--seed", "11", "--parts", "3", "--strategy", strategy, "--block-size", "16KiB"}
			local := startMount(t, src, flags...)
			remote := startMount(t, "s3://data/train/set", append(flags, "--s3-endpoint", s.endpoint)...)
			lp, rp := readAll(t, local), readAll(t, remote)
			for key, b := range lp {
				if !bytes.Equal(b, rp[key]) {
					t.Fatalf("part %s (epoch/part/K): %d bytes from S3 differ from %d bytes from the local directory", key, len(rp[key]), len(b))
				}
			}
			for epoch := range 2 {
				for _, k := range []int{1, 3} {
					var got [][32]byte
					for i := range k {
						got = append(got, hashes(frames(t, rp[fmt.Sprintf("%d/%d/%d", epoch, i, k)]))...)
					}
					if !slices.Equal(sortedHashes(got), want) {
						t.Fatalf("epoch %d, K=%d: the parts from S3 do not hold every source record exactly once (%d records, want %d)", epoch, k, len(got), len(want))
					}
				}
			}
			// A read at any offset equals the sequential read's bytes.
			b := rp["1/1/3"]
			f, err := os.Open(remote.part(1, 1, 3))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			r := rand.New(rand.NewPCG(1, 2))
			for range 20 {
				off := r.IntN(len(b))
				n := min(1+r.IntN(40000), len(b)-off)
				got := make([]byte, n)
				if _, err := f.ReadAt(got, int64(off)); err != nil && err != io.EOF {
					t.Fatal(err)
				}
				if !bytes.Equal(got, b[off:off+n]) {
					t.Fatalf("read of %d bytes at offset %d differs from the sequential read", n, off)
				}
			}
		})
	}
}

// faultProxy forwards TCP connections to an S3 server. While faults are
// on, a new connection is faulted with some probability: its response is
// cut off mid-body, held past the client's deadline, or replaced by a 503
// SlowDown; a faulted connection is closed after its fault.
type faultProxy struct {
	t        *testing.T
	l        net.Listener
	target   string
	faulting atomic.Bool
	faults   [3]atomic.Int64 // cut, delayed, slowdown
	mu       sync.Mutex
	conns    map[net.Conn]bool
	closed   chan struct{} // closed when the test ends
	rng      *rand.Rand
	delay    time.Duration
	only     int // with faults on, every new connection gets fault only; -1: a random one, or none
}

func startProxy(t *testing.T, target string, delay time.Duration) *faultProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{t: t, l: l, target: target, conns: map[net.Conn]bool{}, rng: rand.New(rand.NewPCG(7, 7)), delay: delay, only: -1, closed: make(chan struct{})}
	go p.serve()
	t.Cleanup(func() { close(p.closed); l.Close(); p.closeAll() })
	return p
}

func (p *faultProxy) endpoint() string { return "http://" + p.l.Addr().String() }

// setFaults turns faults on or off, closing the connections open, so that
// the client's next requests go through new ones.
func (p *faultProxy) setFaults(on bool) {
	p.faulting.Store(on)
	p.closeAll()
}

func (p *faultProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *faultProxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
}

func (p *faultProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		fault := -1
		if p.faulting.Load() {
			p.mu.Lock()
			if p.only >= 0 {
				fault = p.only
			} else if p.rng.IntN(10) < 4 {
				fault = p.rng.IntN(3)
			}
			p.mu.Unlock()
		}
		go p.handle(c, fault)
	}
}

func (p *faultProxy) handle(c net.Conn, fault int) {
	p.track(c, true)
	defer p.track(c, false)
	defer c.Close()
	if fault == 2 {
		// A 503 SlowDown in place of the server's answer.
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		p.faults[2].Add(1)
		body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`
		fmt.Fprintf(c, "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.track(s, true)
	defer p.track(s, false)
	defer s.Close()
	go io.Copy(s, c)
	switch fault {
	case 0:
		// Headers and part of the body, then the connection drops.
		buf := make([]byte, 4096)
		n, _ := io.ReadAtLeast(s, buf, 1)
		if n > 0 {
			c.Write(buf[:max(1, n/2)])
		}
		p.faults[0].Add(1)
	case 1:
		// Nothing until well past the client's deadline.
		p.faults[1].Add(1)
		select {
		case <-time.After(p.delay):
		case <-p.closed:
		}
	default:
		io.Copy(c, s)
	}
}

func TestS3ReadsThroughFaultsGiveCorrectBytesOrEIOAndRecover(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 3000, 64, 4, 3, "clustered")
	s.upload("data", "faults", src)
	p := startProxy(t, s.addr, 4*time.Second)
	flags := []string{"--seed", "5", "--parts", "3", "--block-size", "32KiB"}
	local := startMount(t, src, flags...)
	remote := startMount(t, "s3://data/faults", append(flags, "--s3-endpoint", p.endpoint(), "--s3-timeout", "1s", "--s3-concurrency", "4")...)
	p.setFaults(true)
	var ok, eio int
	for epoch := range 3 {
		for i := range 3 {
			want := local.read(epoch, i, 3)
			done := make(chan struct{})
			var got []byte
			var err error
			go func() { got, err = os.ReadFile(remote.part(epoch, i, 3)); close(done) }()
			select {
			case <-done:
			case <-time.After(3 * time.Minute):
				t.Fatalf("epoch %d part %d: read stuck under faults\n%s", epoch, i, remote.log)
			}
			switch {
			case err == nil && bytes.Equal(got, want):
				ok++
			case err == nil:
				t.Fatalf("epoch %d part %d: wrong bytes under faults (%d bytes, want %d)", epoch, i, len(got), len(want))
			case errors.Is(err, syscall.EIO):
				eio++
			default:
				t.Fatalf("epoch %d part %d: %v, want the bytes or EIO", epoch, i, err)
			}
		}
	}
	cut, delayed, slow := p.faults[0].Load(), p.faults[1].Load(), p.faults[2].Load()
	t.Logf("parts read whole %d, EIO %d; faults: %d cut mid-body, %d delayed past the deadline, %d SlowDown", ok, eio, cut, delayed, slow)
	if cut == 0 || delayed == 0 || slow == 0 {
		t.Fatalf("not every kind of fault was injected: %d cut, %d delayed, %d SlowDown", cut, delayed, slow)
	}
	// Faults off: the mount serves every part again.
	p.setFaults(false)
	for i := range 3 {
		if got := remote.read(2, i, 3); !bytes.Equal(got, local.read(2, i, 3)) {
			t.Fatalf("epoch 2 part %d: wrong bytes once the faults stopped", i)
		}
	}
}

func TestS3ObjectReplacedDuringMountGivesEIOAndALogNamingIt(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 2000, 16, 4, 2, "clustered")
	s.upload("data", "replaced", src)
	remote := startMount(t, "s3://data/replaced", "--seed", "5", "--block-size", "16KiB", "--s3-endpoint", s.endpoint)
	// Same key, same size, every record intact: two records of one
	// length swapped. Only the ETag says the object is not the one
	// indexed; served from it, a part would hold the wrong records.
	name := "data-00001-of-00002.tfrecord"
	b, err := os.ReadFile(filepath.Join(src, name))
	if err != nil {
		t.Fatal(err)
	}
	frameLen := func(off int) int { return int(binary.LittleEndian.Uint64(b[off:])) + 16 }
	first := -1
	for off := 0; off+frameLen(off) < len(b); off += frameLen(off) {
		if n := frameLen(off); frameLen(off+n) == n && !bytes.Equal(b[off:off+n], b[off+n:off+2*n]) {
			first = off
			break
		}
	}
	if first < 0 {
		t.Fatal("no two adjacent records of one length to swap")
	}
	n := frameLen(first)
	a := slices.Clone(b[first : first+n])
	copy(b[first:], b[first+n:first+2*n])
	copy(b[first+n:], a)
	other := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(other, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.FPutObject(context.Background(), "data", "replaced/"+name, other, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = os.ReadFile(remote.part(0, 0, 1))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a part whose object was replaced: %v, want EIO", err)
	}
	// The daemon's log reaches the test through a pipe: give it time.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		log := remote.log.String()
		if strings.Contains(log, "s3://data/replaced/"+name) && strings.Contains(log, "replaced since indexing") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line naming the replaced object:\n%s", log)
		}
	}
}

func TestS3MountFailsClearlyOnBadCredentialsMissingBucketEmptyPrefixOrUnreachableEndpoint(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 200, 8, 2, 1, "clustered")
	s.upload("data", "set", src)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	for _, c := range []struct {
		name, src, endpoint, secret, want string
	}{
		{"bad credentials", "s3://data/set", s.endpoint, "wrong-secret", "credentials were refused"},
		{"missing bucket", "s3://nosuchbucket/set", s.endpoint, s3Secret, `bucket "nosuchbucket" does not exist`},
		{"empty prefix", "s3://data/nothing-here", s.endpoint, s3Secret, "no files matching"},
		{"unreachable endpoint", "s3://data/set", dead, s3Secret, "cannot reach the S3 endpoint"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("AWS_SECRET_ACCESS_KEY", c.secret)
			mnt := filepath.Join(t.TempDir(), "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "mount", c.src, mnt, "--cache-dir", filepath.Join(t.TempDir(), "cache"), "--s3-endpoint", c.endpoint)
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(2 * time.Minute):
				cmd.Process.Kill()
				exec.Command("umount", "-l", mnt).Run()
				t.Fatalf("mount did not fail\n%s", out.String())
			}
			if err == nil {
				t.Fatalf("mount exited 0, want an error\n%s", out.String())
			}
			if !strings.Contains(out.String(), c.want) {
				t.Fatalf("error does not say %q:\n%s", c.want, out.String())
			}
			if mounted(mnt) {
				exec.Command("umount", "-l", mnt).Run()
				t.Fatalf("%s left mounted", mnt)
			}
		})
	}
}

func TestS3IndexSidecarIsReusedUntilAnObjectsETagChanges(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 500, 8, 2, 2, "clustered")
	s.upload("data", "sidecar", src)
	cache := filepath.Join(t.TempDir(), "cache")
	index := func() string {
		return corgifs(t, "index", "s3://data/sidecar", "--s3-endpoint", s.endpoint, "--cache-dir", cache)
	}
	if out := index(); !strings.Contains(out, "from cache  false") {
		t.Fatalf("first index:\n%s", out)
	}
	if out := index(); !strings.Contains(out, "from cache  true") {
		t.Fatalf("second index of unchanged objects did not reuse the sidecar:\n%s", out)
	}
	// Same key, same size, other bytes: only the ETag says it changed.
	name := "data-00000-of-00002.tfrecord"
	b, err := os.ReadFile(filepath.Join(src, name))
	if err != nil {
		t.Fatal(err)
	}
	b[50] ^= 1
	if _, err := s.client.PutObject(context.Background(), "data", "sidecar/"+name, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, "index", "s3://data/sidecar", "--s3-endpoint", s.endpoint, "--cache-dir", cache)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	// The flipped bit is in a record: the new object fails its CRC check
	// when indexed again, rather than being served from the old index.
	if err == nil && strings.Contains(out.String(), "from cache  true") {
		t.Fatalf("index of a replaced object came from the old sidecar:\n%s", out.String())
	}
	if !strings.Contains(errb.String(), "rebuilding index") || !strings.Contains(errb.String(), name) {
		t.Fatalf("no log line saying why the index is rebuilt:\n%s", errb.String())
	}
}

func TestS3ServerKilledMidEpochGivesEIOAndTheMountRecoversWhenItIsBack(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 2000, 16, 4, 2, "clustered")
	s.upload("data", "restart", src)
	flags := []string{"--seed", "9", "--parts", "3", "--block-size", "16KiB"}
	local := startMount(t, src, flags...)
	remote := startMount(t, "s3://data/restart", append(flags, "--s3-endpoint", s.endpoint, "--s3-timeout", "2s")...)
	if !bytes.Equal(remote.read(0, 0, 3), local.read(0, 0, 3)) {
		t.Fatal("epoch 0 part 0 differs from the local directory's")
	}
	s.kill()
	// A part no reader has opened: none of its blocks is in memory.
	want := local.read(7, 2, 3)
	done := make(chan error, 1)
	go func() {
		b, err := os.ReadFile(remote.part(7, 2, 3))
		if err == nil && !bytes.Equal(b, want) {
			err = errors.New("wrong bytes")
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("read with the server down: %v, want EIO", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("read stuck with the server down\n%s", remote.log)
	}
	s.start()
	for i := range 3 {
		if !bytes.Equal(remote.read(7, i, 3), local.read(7, i, 3)) {
			t.Fatalf("epoch 7 part %d differs from the local directory's once the server is back", i)
		}
	}
}

func TestS3SignalWhileGETsAreHeldExitsAndFreesTheMountpoint(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 1000, 16, 4, 2, "clustered")
	s.upload("data", "held", src)
	p := startProxy(t, s.addr, 10*time.Minute)
	remote := startMount(t, "s3://data/held", "--seed", "3", "--block-size", "16KiB", "--s3-endpoint", p.endpoint(), "--s3-timeout", "5m")
	p.mu.Lock()
	p.only = 1 // every GET is held
	p.mu.Unlock()
	p.setFaults(true)
	done := make(chan error, 1)
	go func() {
		_, err := os.ReadFile(remote.part(0, 0, 1))
		done <- err
	}()
	for deadline := time.Now().Add(time.Minute); p.faults[1].Load() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no GET reached the proxy")
		}
	}
	// stop sends SIGTERM and fails the test unless the daemon exits 0
	// within 20s and leaves nothing mounted.
	remote.stop()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the read of a part whose GETs were all held succeeded")
		}
	case <-time.After(time.Minute):
		t.Fatal("the reader is still stuck after the daemon exited")
	}
}
