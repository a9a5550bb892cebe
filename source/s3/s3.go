// Package s3 is a source.Source of objects in an S3-compatible store (AWS
// S3, MinIO, Ceph RGW, versitygw, R2 and GCS through their S3 APIs).
//
// It uses minio-go: a small, well-kept client whose dependency tree is a
// fraction of the AWS SDK's, which signs for any S3 server, pages listings
// and exposes the raw ranged GET with If-Match that the loader needs; only
// the credentials come from the AWS SDK's config loader (credentials.go).
// Retries are corgifs's own, because a body cut off mid-transfer is retried
// by nobody else and every retry must stay pinned to the indexed ETag.
package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/corgifs/corgifs/source"
)

// Config says how to reach the store; zero fields take the AWS
// environment's values or the defaults.
type Config struct {
	Endpoint string // URL (http://host:port) or host; default AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url, else AWS S3
	Region   string // default AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else asked of the server
	// PathStyle addresses buckets as endpoint/bucket rather than
	// bucket.endpoint (MinIO and most S3 servers but AWS).
	PathStyle bool
	// Concurrency bounds the GETs in flight (default 24: 10 Gb/s is ~150
	// GETs/s of 8 MiB, each ~0.13 s on one connection at ~85 MB/s, so ~19
	// in flight, and 24 for slower connections).
	Concurrency int
	// Timeout is the deadline of one request, body included (default 30s).
	Timeout time.Duration
	// Attempts is how many times a failed read is tried (default 5).
	Attempts int
	// SplitSize is the largest range one GET fetches: a read of more is
	// fetched as several ranged GETs at once (split.go). 0 means
	// DefaultSplitSize; negative, never split.
	SplitSize int64
	Logger    *slog.Logger
}

// Source is a bucket and prefix in an S3 store.
type Source struct {
	bucket, prefix string // prefix ends in "/" unless empty
	endpoint       string
	core           minio.Core    // listing and checks, with minio-go's retries
	reads          *minio.Client // ranged GETs: one request a try
	sem            chan struct{}
	split          int64 // SplitSize; 0: never split
	timeout        time.Duration
	attempts       int
	log            *slog.Logger
	count          *counters
	credsFrom      origin // where the credentials come from, for errors
	noCreds        error  // the instance metadata service's answer when there are none (anonymous requests), else nil
}

var (
	_ source.Source       = (*Source)(nil)
	_ source.RunRequester = (*object)(nil)
)

// IsURL reports whether src names an S3 source (s3://bucket/prefix).
func IsURL(src string) bool { return strings.HasPrefix(src, "s3://") }

// settings are the endpoint and region to use, in the AWS tools' order: the
// Config (corgifs's flags), the environment, the profile in the shared
// config file, else AWS S3 and a region asked of the server.
func (c Config) settings() (endpoint, region string) {
	p := readProfile(configFile(), profileName())
	endpoint = firstSet(c.Endpoint, os.Getenv("AWS_ENDPOINT_URL_S3"), os.Getenv("AWS_ENDPOINT_URL"), p.Endpoint, "https://s3.amazonaws.com")
	region = firstSet(c.Region, os.Getenv("AWS_REGION"), os.Getenv("AWS_DEFAULT_REGION"), p.Region)
	return endpoint, region
}

// New returns the source of the objects under s3://bucket/prefix, after
// checking that the endpoint answers, the credentials are accepted and
// the bucket exists, so that a mount fails at once with the reason.
func New(ctx context.Context, rawURL string, c Config) (*Source, error) {
	bucket, prefix, ok := strings.Cut(strings.TrimPrefix(rawURL, "s3://"), "/")
	if !IsURL(rawURL) || bucket == "" {
		return nil, fmt.Errorf("source %q: want s3://bucket/prefix", rawURL)
	}
	prefix = strings.Trim(prefix, "/")
	if ok && prefix != "" {
		prefix += "/"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Concurrency = cmp(c.Concurrency, 24)
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	c.Attempts = cmp(c.Attempts, 5)
	switch {
	case c.SplitSize == 0:
		c.SplitSize = DefaultSplitSize
	case c.SplitSize < 0:
		c.SplitSize = 0
	}
	endpoint, region := c.settings()
	if !strings.Contains(endpoint, "://") {
		endpoint = "https://" + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("S3 endpoint %q: want http(s)://host[:port]", endpoint)
	}
	// The AWS CLI's chain (see credentials.go), found once here so that
	// a mount names the source it uses or fails saying why.
	creds, from, none, err := chain(ctx, region, c.Timeout, c.Logger)
	if err != nil {
		return nil, fmt.Errorf("s3://%s: %w", bucket, err)
	}
	if none != nil {
		c.Logger.Warn("credentials from: none: no AWS credentials were found, requests are anonymous", "instance_metadata", none)
	} else {
		c.Logger.Info("credentials from: " + from.From)
	}
	lookup := minio.BucketLookupAuto
	if c.PathStyle {
		lookup = minio.BucketLookupPath
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   c.Concurrency,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: c.Timeout,
	}
	count := &counters{}
	client := func(region string, retries int) (*minio.Client, error) {
		cl, err := minio.New(u.Host, &minio.Options{Creds: creds, Secure: u.Scheme == "https", Transport: countingTransport{tr, count},
			BucketLookup: lookup, Region: region, MaxRetries: retries})
		if err != nil {
			return nil, fmt.Errorf("S3 client for %s: %w", endpoint, err)
		}
		return cl, nil
	}
	// Listing and the checks at mount get minio-go's few tries.
	cl, err := client(region, 3)
	if err != nil {
		return nil, err
	}
	s := &Source{bucket: bucket, prefix: prefix, endpoint: u.Scheme + "://" + u.Host, core: minio.Core{Client: cl},
		sem: make(chan struct{}, c.Concurrency), split: c.SplitSize, timeout: c.Timeout, attempts: c.Attempts, log: c.Logger, count: count,
		credsFrom: from, noCreds: none}
	cctx, cancel := context.WithTimeout(ctx, 2*c.Timeout)
	defer cancel()
	exists, err := cl.BucketExists(cctx, bucket)
	if err != nil {
		return nil, s.explain(err)
	}
	if !exists {
		return nil, fmt.Errorf("%s: bucket %q does not exist at %s", s, bucket, s.endpoint)
	}
	// Reads are tried by ReadAt's loop alone, each try one request
	// (MaxRetries 1 is one attempt), so that a read costs at most
	// Attempts GETs and "retries" counts every GET past the first. The
	// region is the one the check found (cached by minio-go, no
	// request), else the read client finds it itself.
	if region == "" {
		if loc, err := cl.GetBucketLocation(cctx, bucket); err == nil {
			region = loc
		}
	}
	if s.reads, err = client(region, 1); err != nil {
		return nil, err
	}
	return s, nil
}

// explain turns an error of a request at mount into one that names the
// problem: credentials, bucket, endpoint.
func (s *Source) explain(err error) error {
	er := minio.ToErrorResponse(err)
	switch er.Code {
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken", "Forbidden":
		if s.noCreds != nil {
			return fmt.Errorf("%s: %s refused anonymous access (%s: %s), and %s (the instance metadata service: %w)", s, s.endpoint, er.Code, er.Message, noCredentials, s.noCreds)
		}
		return fmt.Errorf("%s: the credentials were refused by %s (%s: %s); they came from %s; %s: %w",
			s, s.endpoint, er.Code, er.Message, s.credsFrom.From, s.credsFrom.Fix, err)
	case "NoSuchBucket":
		return fmt.Errorf("%s: bucket %q does not exist at %s: %w", s, s.bucket, s.endpoint, err)
	}
	if er.StatusCode == http.StatusForbidden {
		if s.noCreds != nil {
			return fmt.Errorf("%s: %s refused anonymous access, and %s (the instance metadata service: %w)", s, s.endpoint, noCredentials, s.noCreds)
		}
		return fmt.Errorf("%s: access denied by %s to the credentials from %s (wrong credentials, or no permission on the bucket; %s): %w", s, s.endpoint, s.credsFrom.From, s.credsFrom.Fix, err)
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: cannot reach the S3 endpoint %s (set {s3-endpoint} or AWS_ENDPOINT_URL): %w", s, s.endpoint, err)
	}
	return fmt.Errorf("%s at %s: %w", s, s.endpoint, err)
}

func (s *Source) String() string {
	return "s3://" + s.bucket + "/" + strings.TrimSuffix(s.prefix, "/")
}

// ID names the endpoint too: the same bucket name on two servers is two
// datasets.
func (s *Source) ID() string { return s.endpoint + "/" + s.bucket + "/" + s.prefix }

// List lists the objects under the prefix whose base names match, page by
// page.
func (s *Source) List(ctx context.Context, match func(string) bool) ([]source.Object, error) {
	var objs []source.Object
	for o := range s.core.Client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("list %s: %w", s, s.explain(o.Err))
		}
		rel := strings.TrimPrefix(o.Key, s.prefix)
		if rel == "" || strings.HasSuffix(rel, "/") || !match(path.Base(rel)) {
			continue
		}
		objs = append(objs, source.Object{Path: rel, Size: o.Size, Mtime: o.LastModified.UnixNano(), Version: o.ETag})
	}
	slices.SortFunc(objs, func(a, b source.Object) int { return strings.Compare(a.Path, b.Path) })
	return objs, nil
}

// Open returns a reader of the object at rel whose every GET is pinned to
// the ETag version. It makes no request.
func (s *Source) Open(rel, version string) (source.File, error) {
	return &object{s: s, key: s.prefix + rel, etag: version}, nil
}

type object struct {
	s         *Source
	key, etag string
}

func (o *object) Name() string { return "s3://" + o.s.bucket + "/" + o.key }
func (o *object) Close() error { return nil }

// readRange reads len(p) bytes at off with one ranged GET, retried with
// exponential backoff and jitter on errors that may pass (5xx, 429,
// SlowDown, timeouts, connections reset or cut mid-body). It gives up
// after the configured attempts, each under the per-request deadline, so
// that it ends in bounded time. A short read is an error: callers read
// ranges they know exist. ReadAt (split.go) calls it for each range. It
// also returns the GETs it made.
func (o *object) readRange(p []byte, off int64) (int, int64, error) {
	var err error
	var gets int64
	for attempt := range o.s.attempts {
		if attempt > 0 {
			o.s.count.retries.Add(1)
			// Full jitter: 0 to 100ms·2^attempt, at most 5s.
			d := min(100*time.Millisecond<<attempt, 5*time.Second)
			time.Sleep(rand.N(d))
		}
		err = o.get(p, off)
		gets++
		if err == nil {
			o.s.count.getBytes.Add(int64(len(p)))
			return len(p), gets, nil
		}
		if !retryable(err) {
			break
		}
		o.s.log.Debug("S3 read failed; retrying", "object", o.Name(), "offset", off, "attempt", attempt+1, "err", err)
	}
	o.s.count.failed.Add(1)
	if errors.Is(err, source.ErrChanged) {
		o.s.count.changed.Add(1)
		o.s.log.Error("S3 object replaced since indexing; its blocks give EIO (remount to reindex)", "object", o.Name(), "err", err)
		return 0, gets, fmt.Errorf("read %s at offset %d: %w: %w", o.Name(), off, err, syscall.EIO)
	}
	return 0, gets, fmt.Errorf("read %s at offset %d (%d bytes): %w: %w", o.Name(), off, len(p), err, syscall.EIO)
}

// readRun reads the adjacent ranges ps at off (ps[0] at off, ps[1] right
// after it, ...) with one ranged GET, calling arrived(i) once ps[i] is in,
// as readRange reads one: retried on the same errors, within the same
// attempts. A try that fails part way is tried again from the first range
// not yet in, so that no range is passed to arrived twice. It returns the
// GETs it made; an error of arrived ends it with that error.
func (o *object) readRun(ps [][]byte, off int64, arrived func(i int) error) (int64, error) {
	var err error
	var gets int64
	done := 0 // ranges in and handed to arrived, from the first
	for attempt := range o.s.attempts {
		if attempt > 0 {
			o.s.count.retries.Add(1)
			d := min(100*time.Millisecond<<attempt, 5*time.Second)
			time.Sleep(rand.N(d))
		}
		from := off
		for _, p := range ps[:done] {
			from += int64(len(p))
		}
		var in func(int) error
		if arrived != nil {
			in = func(i int) error { return arrived(done + i) }
		}
		var k int
		k, err = o.getRun(ps[done:], from, in)
		gets++
		if k > 0 {
			var n int64
			for _, p := range ps[done : done+k] {
				n += int64(len(p))
			}
			// The bytes of the ranges in: a try that failed after some
			// did bring them, and they are not asked for again.
			o.s.count.getBytes.Add(n)
		}
		done += k
		if err == nil {
			return gets, nil
		}
		var ae *arrivedError
		if errors.As(err, &ae) {
			return gets, ae.err
		}
		if !retryable(err) {
			break
		}
		o.s.log.Debug("S3 read failed; retrying", "object", o.Name(), "offset", from, "attempt", attempt+1, "err", err)
	}
	o.s.count.failed.Add(1)
	var n int64
	for _, p := range ps {
		n += int64(len(p))
	}
	if errors.Is(err, source.ErrChanged) {
		o.s.count.changed.Add(1)
		o.s.log.Error("S3 object replaced since indexing; its blocks give EIO (remount to reindex)", "object", o.Name(), "err", err)
		return gets, fmt.Errorf("read %s at offset %d: %w: %w", o.Name(), off, err, syscall.EIO)
	}
	return gets, fmt.Errorf("read %s at offset %d (%d bytes in %d adjacent ranges): %w: %w", o.Name(), off, n, len(ps), err, syscall.EIO)
}

// ReadRunCounted reads adjacent ranges with one GET (source.RunRequester).
func (o *object) ReadRunCounted(ps [][]byte, off int64, arrived func(i int) error) (int64, error) {
	if len(ps) == 0 {
		return 0, nil
	}
	return o.readRun(ps, off, arrived)
}

// get makes one ranged GET of len(p) bytes at off into p.
func (o *object) get(p []byte, off int64) error {
	_, err := o.getRun([][]byte{p}, off, nil)
	return err
}

// getRun makes one ranged GET of the bytes at off into ps, back to back:
// ps[0] gets the first len(ps[0]) bytes, ps[1] the next, and so on. Once
// ps[i] is filled, arrived(i) is called (if arrived is set) before the
// body is read on; an error of it ends the GET with that error, wrapped in
// arrivedError. It returns how many of ps, from the first, were handed to
// arrived: a try that fails part way returns those that were.
func (o *object) getRun(ps [][]byte, off int64, arrived func(i int) error) (int, error) {
	var n int64
	for _, p := range ps {
		n += int64(len(p))
	}
	o.s.sem <- struct{}{}
	defer func() { <-o.s.sem }()
	ctx, cancel := context.WithTimeout(context.Background(), o.s.timeout)
	defer cancel()
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+n-1); err != nil {
		return 0, err
	}
	if o.etag != "" {
		if err := opts.SetMatchETag(o.etag); err != nil {
			return 0, err
		}
	}
	o.s.count.gets.Add(1)
	var status int
	ctx = withStatus(ctx, &status)
	body, info, hdr, err := minio.Core{Client: o.s.reads}.GetObject(ctx, o.s.bucket, o.key, opts)
	if err != nil {
		er := minio.ToErrorResponse(err)
		switch {
		case er.StatusCode == http.StatusPreconditionFailed || er.Code == "PreconditionFailed":
			return 0, fmt.Errorf("ETag is no longer %q: %w", o.etag, source.ErrChanged)
		case er.Code == "NoSuchKey" || er.StatusCode == http.StatusNotFound:
			return 0, fmt.Errorf("object removed: %w", source.ErrChanged)
		case er.StatusCode == http.StatusRequestedRangeNotSatisfiable || er.Code == "InvalidRange":
			return 0, fmt.Errorf("object shorter than indexed: %w", source.ErrChanged)
		}
		return 0, err
	}
	defer body.Close()
	if o.etag != "" && info.ETag != "" && info.ETag != o.etag {
		// A server that ignores If-Match.
		return 0, fmt.Errorf("ETag is now %q, was %q: %w", info.ETag, o.etag, source.ErrChanged)
	}
	if err := checkRange(status, hdr, off, n, o.etag); err != nil {
		return 0, o.bad(err, status, hdr, off, n)
	}
	// With its length announced, a body is cut there by net/http: each
	// piece is passed on as it arrives. Without, a body longer than the
	// range is not the range asked for, which only its end shows: no
	// piece is passed on before.
	early := hdr.Get("Content-Length") != ""
	handed := func(i int) int { // of the first i filled
		if early {
			return i
		}
		return 0
	}
	var got int64
	for i, p := range ps {
		k, err := io.ReadFull(body, p)
		got += int64(k)
		if err != nil {
			if ctx.Err() != nil {
				return handed(i), fmt.Errorf("no response within %s: %w", o.s.timeout, ctx.Err())
			}
			if hdr.Get("Content-Length") == "" && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
				// With no length announced, the body ended before the
				// range: the server's answer, not a connection cut.
				return handed(i), o.bad(fmt.Errorf("body ended after %d of %d bytes: %w", got, n, errShortBody), status, hdr, off, n)
			}
			// Short of the length announced (checked equal to the
			// range): the connection was cut.
			return handed(i), fmt.Errorf("body cut off after %d of %d bytes: %w", got, n, err)
		}
		if i == len(ps)-1 {
			// Nothing past the range: a longer body is not the range
			// asked for, and none of it may be passed on as checked.
			var one [1]byte
			if k, _ := body.Read(one[:]); k > 0 {
				return handed(i), o.bad(fmt.Errorf("body longer than %d bytes: %w", n, errShortBody), status, hdr, off, n)
			}
		}
		if arrived != nil && early {
			if err := arrived(i); err != nil {
				return i, &arrivedError{err}
			}
		}
	}
	if arrived != nil && !early {
		for i := range ps {
			if err := arrived(i); err != nil {
				return i, &arrivedError{err}
			}
		}
	}
	return len(ps), nil
}

// arrivedError is the error of the callback of getRun: the caller's
// check of the bytes, not a failure of the GET, so never tried again.
type arrivedError struct{ err error }

func (e *arrivedError) Error() string { return e.err.Error() }
func (e *arrivedError) Unwrap() error { return e.err }

// bad counts and logs an answer whose bytes are not the range asked for,
// and returns err: the read fails, and nothing of it is served or cached.
func (o *object) bad(err error, status int, hdr http.Header, off, n int64) error {
	o.s.count.badResponses.Add(1)
	o.s.log.Warn("S3 answer to a ranged GET refused: not the bytes asked for", "object", o.Name(), "offset", off, "length", n,
		"status", status, "content_range", hdr.Get("Content-Range"), "content_length", hdr.Get("Content-Length"), "etag", hdr.Get("ETag"), "err", err)
	return err
}

// retryable reports whether a failed GET may succeed if tried again.
func retryable(err error) bool {
	if errors.Is(err, source.ErrChanged) || errors.Is(err, errBadResponse) {
		// A server that ignored Range or rewrote it does the same again.
		return false
	}
	er := minio.ToErrorResponse(err)
	switch {
	case er.StatusCode >= 500, er.StatusCode == http.StatusTooManyRequests, er.StatusCode == http.StatusRequestTimeout:
		return true
	case er.Code == "SlowDown" || er.Code == "RequestTimeout" || er.Code == "InternalError" || er.Code == "ServiceUnavailable":
		return true
	case er.StatusCode != 0:
		// Any other answer of the server (403, 400) will be the same.
		return false
	}
	// No answer: timeouts, resets, refused connections, bodies cut off.
	return true
}

func firstSet(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

func cmp(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}
