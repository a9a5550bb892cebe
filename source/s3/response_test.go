package s3

import (
	"errors"
	"net/http"
	"testing"
)

func TestCheckRangeAcceptsOnlyA206OfTheExactRangeAndLength(t *testing.T) {
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	good := h("Content-Range", "bytes 100-199/1000", "Content-Length", "100", "ETag", `"abc"`)
	for _, c := range []struct {
		name   string
		status int
		h      http.Header
		etag   string
		want   error
	}{
		{"exact", 206, good, "abc", nil},
		{"size unknown", 206, h("Content-Range", "bytes 100-199/*", "Content-Length", "100", "ETag", `"abc"`), "abc", nil},
		{"no pinned version", 206, h("Content-Range", "bytes 100-199/1000"), "", nil},
		{"whole object", 200, h("Content-Length", "1000", "ETag", `"abc"`), "abc", errBadResponse},
		{"200 with the right Content-Range", 200, good, "abc", errBadResponse},
		{"shifted range", 206, h("Content-Range", "bytes 101-200/1000", "Content-Length", "100", "ETag", `"abc"`), "abc", errBadResponse},
		{"longer range", 206, h("Content-Range", "bytes 100-299/1000", "Content-Length", "200", "ETag", `"abc"`), "abc", errBadResponse},
		{"no Content-Range", 206, h("Content-Length", "100", "ETag", `"abc"`), "abc", errBadResponse},
		{"garbled Content-Range", 206, h("Content-Range", "bytes 100-199", "Content-Length", "100", "ETag", `"abc"`), "abc", errBadResponse},
		{"other unit", 206, h("Content-Range", "items 100-199/1000", "Content-Length", "100", "ETag", `"abc"`), "abc", errBadResponse},
		{"no ETag", 206, h("Content-Range", "bytes 100-199/1000", "Content-Length", "100"), "abc", errBadResponse},
		{"short length", 206, h("Content-Range", "bytes 100-199/1000", "Content-Length", "50", "ETag", `"abc"`), "abc", errShortBody},
	} {
		err := checkRange(c.status, c.h, 100, 100, c.etag)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: checkRange = %v, want %v", c.name, err, c.want)
		}
		if err != nil && retryable(err) != errors.Is(err, errShortBody) {
			t.Errorf("%s: retryable(%v) = %v: a refused range is not tried again, a short body is", c.name, err, retryable(err))
		}
	}
}
