//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// A MinIO server on 127.0.0.1 serving a directory of this machine's disk.
// It is started here, and its metrics read here, for every section that
// uses one: --probe and --s3fs through their own minioServer, --s3 and
// --s3speed with --s3-server minio through an s3Server that holds one.
// It counts requests itself: its node metrics (public,
// MINIO_PROMETHEUS_AUTH_TYPE) give the GetObject requests and the bytes
// sent, read before and after a run, so nothing stands between the client
// and the server that would cost the two cores a copy of every byte.

const (
	minioAccess = "corgifs-bench-access"
	minioSecret = "corgifs-bench-secret-key"
)

type minioServer struct {
	cmd      *exec.Cmd
	addr     string
	endpoint string // http://addr
	client   *minio.Client
	// scraped is when the metrics were last read: MinIO computes them
	// at most every 10 s and serves the cached values in between
	// (measured: five GETs showed after 10.4 s), so a read waits until
	// metricsTTL has passed since the last.
	scraped time.Time
}

// metricsTTL is how long MinIO may serve its node metrics from cache,
// with a margin.
const metricsTTL = 11 * time.Second

// startMinIO starts MinIO on dir, on free ports of 127.0.0.1, with its
// output in minio.log beside dir, and waits until it answers.
func startMinIO(ctx context.Context, dir string) (*minioServer, error) {
	bin, err := exec.LookPath("minio")
	if err != nil {
		return nil, errors.New("no minio on PATH: GOBIN=/usr/local/bin go install github.com/minio/minio@latest (.ci/run builds it)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	free := func() (string, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		defer l.Close()
		return l.Addr().String(), nil
	}
	addr, err := free()
	if err != nil {
		return nil, err
	}
	console, err := free()
	if err != nil {
		return nil, err
	}
	m := &minioServer{addr: addr, endpoint: "http://" + addr}
	m.cmd = exec.CommandContext(ctx, bin, "server", dir, "--address", addr, "--console-address", console, "--quiet")
	m.cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+minioAccess, "MINIO_ROOT_PASSWORD="+minioSecret,
		// The counters are read from the metrics, unauthenticated; no
		// console, no update checks.
		"MINIO_PROMETHEUS_AUTH_TYPE=public", "MINIO_BROWSER=off", "MINIO_UPDATE=off")
	log, err := os.Create(filepath.Join(filepath.Dir(dir), "minio.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	m.cmd.Stdout, m.cmd.Stderr = log, log
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		return nil, err
	}
	// The region the corgifs processes are given (env): minio-go need not
	// ask the server for a bucket's location first.
	m.client, err = minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(minioAccess, minioSecret, ""),
		BucketLookup: minio.BucketLookupPath, Region: "us-east-1"})
	if err != nil {
		m.stop()
		return nil, err
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := m.client.ListBuckets(ctx); err == nil {
			return m, nil
		} else if time.Now().After(deadline) {
			m.stop()
			return nil, fmt.Errorf("minio on %s did not answer within a minute (its log: %s): %w", addr, log.Name(), err)
		}
	}
}

func (m *minioServer) stop() {
	m.cmd.Process.Kill()
	m.cmd.Wait()
}

// env is the environment a corgifs process needs to reach the server.
func (m *minioServer) env() []string {
	return append(os.Environ(), s3Env(minioAccess, minioSecret)...)
}

// s3Env is the environment that makes corgifs (package source/s3) reach a
// bench server on its --s3-endpoint with its keys, access and secret, and
// with nothing else the environment may hold: no session token, no other
// endpoint, a region.
func s3Env(access, secret string) []string {
	return []string{"AWS_ACCESS_KEY_ID=" + access, "AWS_SECRET_ACCESS_KEY=" + secret,
		"AWS_SESSION_TOKEN=", "AWS_REGION=us-east-1", "AWS_ENDPOINT_URL="}
}

// setS3Env sets s3Env(access, secret) in this process, for the corgifs
// processes it starts and its own sources.
func setS3Env(access, secret string) {
	for _, kv := range s3Env(access, secret) {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
}

// upload puts the files into bucket under prefix, skipping those there
// already at their size.
func (m *minioServer) upload(ctx context.Context, bucket, prefix string, paths []string) error {
	if ok, err := m.client.BucketExists(ctx, bucket); err != nil {
		return err
	} else if !ok {
		if err := m.client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
			return err
		}
	}
	have := map[string]int64{}
	for obj := range m.client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix + "/", Recursive: true}) {
		if obj.Err != nil {
			return obj.Err
		}
		have[obj.Key] = obj.Size
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		key := prefix + "/" + filepath.Base(p)
		if have[key] == fi.Size() {
			continue
		}
		if _, err := m.client.FPutObject(ctx, bucket, key, p, minio.PutObjectOptions{}); err != nil {
			return fmt.Errorf("uploading %s to s3://%s/%s: %w", p, bucket, key, err)
		}
	}
	return nil
}

// serverCounts are the server's counters at one moment.
type serverCounts struct {
	gets     int64   // GetObject requests
	requests int64   // S3 requests of every kind
	sent     int64   // bytes of every response's body
	cpu      float64 // the server process's CPU seconds
	// disk is the bytes the server process read from the disk (with the
	// page cache dropped, what its GETs cost it in I/O: MinIO reads and
	// checks whole erasure blocks of 1 MiB, whatever the range asked).
	disk int64
}

func (a serverCounts) sub(b serverCounts) serverCounts {
	return serverCounts{gets: a.gets - b.gets, requests: a.requests - b.requests, sent: a.sent - b.sent, cpu: a.cpu - b.cpu, disk: a.disk - b.disk}
}

// counts reads the server's node metrics and its CPU time.
func (m *minioServer) counts(ctx context.Context) (serverCounts, error) {
	var c serverCounts
	sent := false
	err := m.scrape(ctx, func(name, labels string, v float64) {
		if name == "minio_s3_requests_total" {
			c.requests += int64(v)
		}
		switch {
		case isGetObject(name, labels):
			c.gets += int64(v) // absent until the first GET
		case name == "minio_s3_traffic_sent_bytes":
			c.sent, sent = int64(v), true
		}
	})
	if err != nil {
		return c, err
	}
	if !sent {
		return c, fmt.Errorf("minio metrics: no minio_s3_traffic_sent_bytes in %s/minio/v2/metrics/node", m.endpoint)
	}
	if c.cpu, err = cpuSeconds(m.cmd.Process.Pid); err != nil {
		return c, err
	}
	c.disk, err = readBytes(m.cmd.Process.Pid)
	return c, err
}

// readBytes is the read_bytes of /proc/pid/io: what process pid made the
// disk read (root only).
func readBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "read_bytes: "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/io: no read_bytes", pid)
}

// isGetObject reports whether a sample of the node metrics is the count of
// GetObject requests.
func isGetObject(name, labels string) bool {
	return name == "minio_s3_requests_total" && strings.Contains(labels, `api="getobject"`)
}

// gets is the count of GetObject requests in the node metrics, read by
// counts: once metricsTTL has passed since the last read, so that the
// count is not MinIO's cached one from before the requests it is to count.
func (m *minioServer) gets(ctx context.Context) (int64, error) {
	c, err := m.counts(ctx)
	return c.gets, err
}

// scrape calls fn with each sample of the server's node metrics, once
// metricsTTL has passed since the last scrape, so that they are fresh.
func (m *minioServer) scrape(ctx context.Context, fn func(name, labels string, v float64)) error {
	select {
	case <-time.After(time.Until(m.scraped.Add(metricsTTL))):
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { m.scraped = time.Now() }()
	return m.readMetrics(ctx, fn)
}

// readMetrics calls fn with each sample of the server's node metrics
// (Prometheus text: name{labels} value), as the server serves them now.
func (m *minioServer) readMetrics(ctx context.Context, fn func(name, labels string, v float64)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.endpoint+"/minio/v2/metrics/node", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("minio metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("minio metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			fn(name, labels, v)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("minio metrics: %w", err)
	}
	return nil
}
