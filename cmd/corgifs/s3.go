package main

import (
	"flag"
	"log/slog"
	"strconv"
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
	fs.StringVar(&f.endpoint, "s3-endpoint", "", "`URL` of the S3 server for an s3://bucket/prefix SRC (default: AWS_ENDPOINT_URL_S3,\nAWS_ENDPOINT_URL, the profile's endpoint_url, else AWS S3). Credentials come from\nthe AWS chain, in its order: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN;\nthe profile AWS_PROFILE (else default) of ~/.aws/credentials and ~/.aws/config (or\nAWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE) with credential_process, SSO or role_arn +\nsource_profile; web identity (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN); container\ncredentials (AWS_CONTAINER_CREDENTIALS_FULL_URI); the instance metadata service\n(AWS_EC2_METADATA_SERVICE_ENDPOINT). The mount logs which one it used")
	fs.StringVar(&f.region, "s3-region", "", "S3 `region` (default: AWS_REGION, AWS_DEFAULT_REGION, the profile's region in the shared\nconfig file, else asked of the server)")
	fs.BoolVar(&f.pathStyle, "s3-path-style", false, "address buckets as ENDPOINT/BUCKET (MinIO and most S3 servers) rather than\nBUCKET.ENDPOINT (default: path style for IP addresses and non-AWS hosts)")
	fs.IntVar(&f.concurrency, "s3-concurrency", 24, "S3 GET requests in flight at most. The default fills a 10 Gb/s link with 8 MiB blocks:\n1.25 GB/s is ~150 GETs/s of 8 MiB; one S3 connection moves ~85 MB/s, so a GET takes\n~0.1 s plus ~30 ms to its first byte, and 150/s × 0.13 s ≈ 19 in flight; 24 leaves room\nfor connections at ~65 MB/s. corgifs tune s3://… measures the right figure for a store")
	fs.DurationVar(&f.timeout, "s3-timeout", 30*time.Second, "deadline of one S3 request, body included; a failed request is tried 5 times\nwith exponential backoff and jitter, then its records give EIO")
}

// args returns the --s3-* flags as a child process is given them.
func (f *s3Flags) args() []string {
	a := []string{"--s3-concurrency", strconv.Itoa(f.concurrency), "--s3-timeout", f.timeout.String()}
	if f.endpoint != "" {
		a = append(a, "--s3-endpoint", f.endpoint)
	}
	if f.region != "" {
		a = append(a, "--s3-region", f.region)
	}
	if f.pathStyle {
		a = append(a, "--s3-path-style")
	}
	return a
}

func (f *s3Flags) config(log *slog.Logger) s3.Config {
	return s3.Config{Endpoint: f.endpoint, Region: f.region, PathStyle: f.pathStyle,
		Concurrency: f.concurrency, Timeout: f.timeout, Logger: log}
}
