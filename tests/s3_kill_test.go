package tests

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// stallProxy is a TCP proxy in front of an S3 server that, while stalling
// is on, passes a response's headers and part of its body and then holds
// the rest until released: a GET caught mid-body.
type stallProxy struct {
	l       net.Listener
	target  string
	stall   atomic.Bool
	stalled atomic.Int64 // responses held mid-body
	mu      sync.Mutex
	conns   map[net.Conn]bool
	release chan struct{} // closed: held responses are cut
}

func startStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{l: l, target: target, conns: map[net.Conn]bool{}, release: make(chan struct{})}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.handle(c, p.stall.Load())
		}
	}()
	t.Cleanup(func() { l.Close(); p.cut(); p.closeAll() })
	return p
}

func (p *stallProxy) endpoint() string { return "http://" + p.l.Addr().String() }

// setStall turns stalling on or off and closes the connections open, so
// that the next requests come through new ones.
func (p *stallProxy) setStall(on bool) {
	p.stall.Store(on)
	p.closeAll()
}

// cut ends every held response: its connection is closed mid-body.
func (p *stallProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.release:
	default:
		close(p.release)
	}
}

func (p *stallProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *stallProxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
}

func (p *stallProxy) handle(c net.Conn, stall bool) {
	p.track(c, true)
	defer p.track(c, false)
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.track(s, true)
	defer p.track(s, false)
	defer s.Close()
	go io.Copy(s, c)
	if !stall {
		io.Copy(c, s)
		return
	}
	// Read until the headers and some of the body are in, pass the headers
	// and half of that body, and hold.
	var got []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		got = append(got, buf[:n]...)
		if i := bytes.Index(got, []byte("\r\n\r\n")); i >= 0 && len(got) > i+4 {
			c.Write(got[:i+4+max(1, (len(got)-i-4)/2)])
			break
		}
		if err != nil {
			return
		}
	}
	p.stalled.Add(1)
	<-p.release
}

// With a GET caught mid-body, the S3 server is killed: the reader gets
// EIO (or, had a retry reached a live server, the right bytes) in bounded
// time, never wrong bytes and never a hang, and once the server is back
// the same part reads as the local directory's.
func TestS3ServerKilledWhileAGETIsMidBodyGivesEIOAndTheMountRecovers(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 2000, 16, 4, 2, "clustered")
	s.upload("data", "midbody", src)
	p := startStallProxy(t, s.addr)
	flags := []string{"--seed", "8", "--block-size", "16KiB"}
	local := startMount(t, src, flags...)
	remote := startMount(t, "s3://data/midbody", append(flags, "--s3-endpoint", p.endpoint(), "--s3-timeout", "20s")...)
	want := local.read(0, 0, 1)
	p.setStall(true)
	done := make(chan error, 1)
	go func() {
		b, err := os.ReadFile(remote.part(0, 0, 1))
		if err == nil && !bytes.Equal(b, want) {
			err = errors.New("wrong bytes")
		}
		done <- err
	}()
	for deadline := time.Now().Add(time.Minute); p.stalled.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no GET was held mid-body")
		}
	}
	// The server dies under the held GET; its connection drops mid-body.
	s.kill()
	p.cut()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, syscall.EIO) {
			t.Fatalf("read with the server killed mid-body: %v, want the right bytes or EIO", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("read stuck after the server was killed mid-body\n%s", remote.log)
	}
	p.setStall(false)
	s.start()
	if !bytes.Equal(remote.read(0, 0, 1), want) {
		t.Fatal("once the server is back, epoch 0 differs from the local directory's")
	}
}
