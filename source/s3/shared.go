package s3

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// Shared is a prefix of a bucket where the nodes of a job coordinate a
// feedback strategy (feedback.Shared, docs/coordinate.md): names are
// written once by a conditional PUT (If-None-Match: *), which the store
// refuses with 412 Precondition Failed when the key exists.
type Shared struct{ s *Source }

// NewShared opens s3://bucket/prefix for coordination, with the same
// endpoint, region and credentials rules as a source, after checking the
// bucket exists.
func NewShared(ctx context.Context, rawURL string, c Config) (*Shared, error) {
	s, err := New(ctx, rawURL, c)
	if err != nil {
		return nil, err
	}
	return &Shared{s: s}, nil
}

func (sh *Shared) String() string { return sh.s.String() }

func (sh *Shared) key(name string) (string, error) {
	if name == "" || strings.HasPrefix(name, "/") || slices.Contains(strings.Split(name, "/"), "..") {
		return "", fmt.Errorf("shared name %q: want a relative path with no '..' element", name)
	}
	return sh.s.prefix + name, nil
}

// Create is one PUT of size bytes (no multipart upload, whose condition
// would go on its completion), conditional on no object having the key.
func (sh *Shared) Create(ctx context.Context, name string, r io.Reader, size int64) error {
	key, err := sh.key(name)
	if err != nil {
		return err
	}
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true}
	opts.SetMatchETagExcept("*") // If-None-Match: *
	_, err = sh.s.core.Client.PutObject(ctx, sh.s.bucket, key, r, size, opts)
	if err == nil {
		return nil
	}
	er := minio.ToErrorResponse(err)
	switch {
	case er.StatusCode == http.StatusPreconditionFailed || er.Code == "PreconditionFailed":
		return fmt.Errorf("create %s/%s: %w", sh.s.bucket, key, fs.ErrExist)
	case er.StatusCode == http.StatusConflict:
		// A concurrent conditional write of the key (AWS answers 409
		// ConditionalRequestConflict): one of them wins, and the body
		// cannot be sent again. Whether ours did is what the object says.
		if _, serr := sh.s.core.Client.StatObject(ctx, sh.s.bucket, key, minio.StatObjectOptions{}); serr == nil {
			return fmt.Errorf("create %s/%s: %w", sh.s.bucket, key, fs.ErrExist)
		}
	}
	return fmt.Errorf("create %s/%s at %s: %w", sh.s.bucket, key, sh.s.endpoint, err)
}

func (sh *Shared) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	key, err := sh.key(name)
	if err != nil {
		return nil, err
	}
	body, _, _, err := sh.s.core.GetObject(ctx, sh.s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		if er := minio.ToErrorResponse(err); er.StatusCode == http.StatusNotFound || er.Code == "NoSuchKey" {
			return nil, fmt.Errorf("open %s/%s: %w", sh.s.bucket, key, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("open %s/%s at %s: %w", sh.s.bucket, key, sh.s.endpoint, err)
	}
	return body, nil
}

func (sh *Shared) List(ctx context.Context, dir string) ([]string, error) {
	key, err := sh.key(dir)
	if err != nil {
		return nil, err
	}
	key += "/"
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var names []string
	for o := range sh.s.core.Client.ListObjects(ctx, sh.s.bucket, minio.ListObjectsOptions{Prefix: key}) {
		if o.Err != nil {
			return nil, fmt.Errorf("list %s/%s at %s: %w", sh.s.bucket, key, sh.s.endpoint, o.Err)
		}
		if name := strings.TrimPrefix(o.Key, key); name != "" && !strings.HasSuffix(name, "/") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}
