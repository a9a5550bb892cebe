package s3

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/corgifs/corgifs/source"
)

func TestNewRefusesURLsThatNameNoBucket(t *testing.T) {
	for _, u := range []string{"s3://", "s3:///prefix", "http://bucket/prefix", "bucket/prefix"} {
		if _, err := New(context.Background(), u, Config{}); err == nil || !strings.Contains(err.Error(), "want s3://bucket/prefix") {
			t.Errorf("New(%q): %v, want an error asking for s3://bucket/prefix", u, err)
		}
	}
}

func TestRetryableAreTheErrorsThatMayPass(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{minio.ErrorResponse{StatusCode: 503, Code: "SlowDown"}, true},
		{minio.ErrorResponse{StatusCode: 500, Code: "InternalError"}, true},
		{minio.ErrorResponse{StatusCode: 429}, true},
		{minio.ErrorResponse{StatusCode: 400, Code: "RequestTimeout"}, true},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, true},
		{fmt.Errorf("body cut off: %w", io.ErrUnexpectedEOF), true},
		{context.DeadlineExceeded, true},
		{minio.ErrorResponse{StatusCode: 403, Code: "AccessDenied"}, false},
		{fmt.Errorf("ETag is no longer %q: %w", "x", source.ErrChanged), false},
	} {
		if got := retryable(c.err); got != c.want {
			t.Errorf("retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
