package s3

// The checks of a ranged GET's answer. HTTP lets a server answer a ranged
// GET with 200 and the whole object, and gateways, caches and some
// S3-compatible servers do; a proxy may shift or cut a range. Such bytes
// are real records from the wrong place: they pass every CRC, so the only
// place to catch them is here, from the status and the headers, before a
// byte is handed to the loader (and through it to the disk cache).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// errBadResponse marks an answer to a ranged GET that is not the range
// asked for, of the version pinned: its bytes are never used.
var errBadResponse = errors.New("the S3 server answered a ranged GET with other bytes than the range asked for (a server, gateway or proxy that ignores or rewrites Range)")

// errShortBody marks an answer whose body is shorter or longer than the
// range it claims: like a body cut off, it may pass if tried again.
var errShortBody = errors.New("the S3 server's body is not the length of the range asked for")

// statusKey is the context key under which get leaves a *int that the
// transport fills with the HTTP status of the answer: minio-go accepts
// both 200 and 206 to a ranged GET and does not say which it got.
type statusKey struct{}

// withStatus returns ctx carrying p, which the transport sets to the
// status of the request made under it.
func withStatus(ctx context.Context, p *int) context.Context {
	return context.WithValue(ctx, statusKey{}, p)
}

// noteStatus records resp's status where the request's context asks.
func noteStatus(r *http.Request, resp *http.Response) {
	if p, ok := r.Context().Value(statusKey{}).(*int); ok {
		*p = resp.StatusCode
	}
}

// checkRange accepts the answer to a GET of n bytes at off pinned to etag
// only if it is a 206 whose Content-Range is exactly that range, whose
// ETag is etag (when one is pinned) and whose Content-Length (when given)
// is n.
func checkRange(status int, h http.Header, off, n int64, etag string) error {
	if status != http.StatusPartialContent {
		return fmt.Errorf("status %d, want 206 Partial Content for bytes %d-%d: %w", status, off, off+n-1, errBadResponse)
	}
	if cr := h.Get("Content-Range"); !rangeIs(cr, off, off+n-1) {
		return fmt.Errorf("Content-Range %q, want bytes %d-%d: %w", cr, off, off+n-1, errBadResponse)
	}
	if etag != "" {
		// A different ETag is the object replaced (source.ErrChanged,
		// checked by the caller); none at all is an answer that cannot
		// be tied to the version indexed.
		if h.Get("ETag") == "" {
			return fmt.Errorf("no ETag, want %q: %w", etag, errBadResponse)
		}
	}
	if cl := h.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err != nil || v != n {
			return fmt.Errorf("Content-Length %q for a range of %d bytes: %w", cl, n, errShortBody)
		}
	}
	return nil
}

// rangeIs reports whether the Content-Range value cr is "bytes first-last/"
// followed by the object's size or "*".
func rangeIs(cr string, first, last int64) bool {
	rest, ok := strings.CutPrefix(cr, "bytes ")
	if !ok {
		return false
	}
	span, total, ok := strings.Cut(rest, "/")
	if !ok || (total != "*" && !digits(total)) {
		return false
	}
	a, b, ok := strings.Cut(span, "-")
	if !ok || !digits(a) || !digits(b) {
		return false
	}
	x, err1 := strconv.ParseInt(a, 10, 64)
	y, err2 := strconv.ParseInt(b, 10, 64)
	return err1 == nil && err2 == nil && x == first && y == last
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
