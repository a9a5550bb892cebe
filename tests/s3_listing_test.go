package tests

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/minio/minio-go/v7"
)

// A prefix holding more objects than one listing page (1000 keys) is
// listed whole: the index has every object and every record.
func TestS3ListingOfMoreObjectsThanOnePageFindsThemAll(t *testing.T) {
	s := startS3(t)
	ctx := context.Background()
	if err := s.client.MakeBucket(ctx, "data", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	const n = 1003
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				b := fmt.Appendf(nil, "{\"i\":%d}\n", i)
				if _, err := s.client.PutObject(ctx, "data", fmt.Sprintf("many/%04d.jsonl", i), bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	g := startObjectGETs(t, s.addr)
	out := corgifs(t, "index", "s3://data/many", "--s3-endpoint", g.srv.URL, "--index", "full", "--cache-dir", t.TempDir())
	if files, records := summaryField(out, "files"), summaryField(out, "records"); files != fmt.Sprint(n) || records != fmt.Sprint(n) {
		t.Fatalf("index of %d objects found %s files and %s records:\n%s", n, files, records, out)
	}
	if pages := g.take()["data"]; pages < 2 {
		t.Fatalf("%d objects listed in %d request(s): the server gave no second page, so the test does not test paging", n, pages)
	}
}
