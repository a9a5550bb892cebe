package main

import (
	"context"
	"flag"
	"log/slog"
	"time"

	"github.com/corgifs/corgifs/source/s3"
)

// s3Flags say how to reach an S3 source (SRC = s3://bucket/prefix).
type s3Flags struct {
	endpoint    string
	region      string
	pathStyle   bool
	concurrency int
	timeout     time.Duration
}

func (f *s3Flags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.endpoint, "s3-endpoint", "", "`URL` of the S3 server for an s3://bucket/prefix SRC (default: AWS_ENDPOINT_URL_S3,\nAWS_ENDPOINT_URL, else AWS S3); credentials come from AWS_ACCESS_KEY_ID,\nAWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, else the shared credentials file (AWS_PROFILE)")
	fs.StringVar(&f.region, "s3-region", "", "S3 `region` (default: AWS_REGION, AWS_DEFAULT_REGION, else asked of the server)")
	fs.BoolVar(&f.pathStyle, "s3-path-style", false, "address buckets as ENDPOINT/BUCKET (MinIO and most S3 servers) rather than\nBUCKET.ENDPOINT (default: path style for IP addresses and non-AWS hosts)")
	fs.IntVar(&f.concurrency, "s3-concurrency", 64, "S3 GET requests in flight at most (64 fill a 10 Gb/s link with 8 MiB blocks)")
	fs.DurationVar(&f.timeout, "s3-timeout", 30*time.Second, "deadline of one S3 request, body included; a failed request is tried 5 times\nwith exponential backoff and jitter, then its records give EIO")
}

// openSource makes the S3 source of src when it is an s3:// URL, checking
// that the endpoint, the credentials and the bucket are good.
func (d *datasetFlags) openSource(ctx context.Context, src string, log *slog.Logger) error {
	if !s3.IsURL(src) || d.source != nil {
		return nil
	}
	s, err := s3.New(ctx, src, s3.Config{Endpoint: d.s3.endpoint, Region: d.s3.region, PathStyle: d.s3.pathStyle,
		Concurrency: d.s3.concurrency, Timeout: d.s3.timeout, Logger: log})
	if err != nil {
		return err
	}
	d.source = s
	return nil
}
