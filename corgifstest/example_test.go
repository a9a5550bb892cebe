package corgifstest_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/corgifs/corgifs/corgifstest"
)

// A test mounts a dataset, reads the parts of an epoch and checks them; the
// mount is gone when the test ends. In a test file this is the body of
// func TestTraining(t *testing.T); here it runs through testing.Benchmark,
// the standard library's way to call a function of a testing.TB outside
// a test, so that its output is checked.
func ExampleMount() {
	readEpoch := func(t testing.TB) {
		src := t.TempDir()
		want := corgifstest.WriteDataset(t, src, 1000, corgifstest.Files(4))
		m := corgifstest.Mount(t, src, corgifstest.Seed(7), corgifstest.Parts(2))
		got := append(m.Records(0, 0, 2), m.Records(0, 1, 2)...)
		fmt.Println(len(got), "records served of", len(want))
		fmt.Println("in source order:", slices.EqualFunc(got, want, bytes.Equal))
		slices.SortFunc(got, bytes.Compare)
		fmt.Println("each once:", slices.EqualFunc(got, want, bytes.Equal))
	}
	testing.Benchmark(func(b *testing.B) { readEpoch(b); b.SkipNow() })
	// Output:
	// 1000 records served of 1000
	// in source order: false
	// each once: true
}
