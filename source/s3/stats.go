package s3

import (
	"net/http"
	"sync/atomic"
)

// Stats counts the requests a Source made, for .corgifs/stats.json: what
// an epoch cost in requests (what object stores bill) and how often the
// store pushed back.
type Stats struct {
	// Requests are the HTTP requests sent, every kind and every try
	// (minio-go's own retries of listings and checks included).
	Requests int64 `json:"requests"`
	// GETs are the ranged GETs of block data made, each try of a read
	// counted (each try is one request: minio-go does not retry reads);
	// GETBytes the bytes they brought.
	GETs     int64 `json:"gets"`
	GETBytes int64 `json:"get_bytes"`
	// Retries are the reads tried again after a failed GET (5xx, 429,
	// SlowDown, timeouts, connections cut).
	Retries int64 `json:"retries"`
	// Throttled are the answers 503, 500 or 429: the store asking to
	// slow down or failing.
	Throttled int64 `json:"throttled"`
	// Changed are the GETs refused because the object is no longer the
	// one indexed (412 for If-Match, 404, 416, or another ETag).
	Changed int64 `json:"changed"`
	// Failed are the reads given up after every try: their records gave EIO.
	Failed int64 `json:"failed"`
	// BadResponses are the answers to a ranged GET refused because they
	// were not the range asked for: not a 206, another Content-Range, no
	// ETag, a Content-Length or a body of another length than the range
	// (a body cut short of the length it announced is a connection cut,
	// not counted here). Their bytes are never served nor cached.
	BadResponses int64 `json:"bad_responses"`
}

type counters struct {
	requests, gets, getBytes, retries, throttled, changed, failed, badResponses atomic.Int64
}

// Stats returns the counts so far.
func (s *Source) Stats() Stats {
	c := s.count
	return Stats{Requests: c.requests.Load(), GETs: c.gets.Load(), GETBytes: c.getBytes.Load(), Retries: c.retries.Load(),
		Throttled: c.throttled.Load(), Changed: c.changed.Load(), Failed: c.failed.Load(), BadResponses: c.badResponses.Load()}
}

// countingTransport counts every request and the answers that say the
// store is busy or failing, below minio-go's retries, so none is missed.
type countingTransport struct {
	http.RoundTripper
	c *counters
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.c.requests.Add(1)
	resp, err := t.RoundTripper.RoundTrip(r)
	if err == nil {
		noteStatus(r, resp)
	}
	if err == nil && (resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests) {
		t.c.throttled.Add(1)
	}
	return resp, err
}
