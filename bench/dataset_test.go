//go:build linux

package main

import (
	"context"
	"testing"

	"github.com/corgifs/corgifs/datagen"
)

// TestShape checks the record size arithmetic against the records datagen
// really writes.
func TestShape(t *testing.T) {
	for _, rs := range []int64{minRecordSize(), 1 << 10, 100 << 10} {
		features, records := shape(64*rs, rs)
		s := datagen.Synthetic{Records: records, Features: features, Classes: dataClasses, Clustered: true, Files: 1, Seed: dataSeed}
		sum, err := s.Write(context.Background(), t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := sum.Bytes / int64(records); got < rs-2 || got > rs+2 {
			t.Errorf("record size %d: %d features make records of %d bytes", rs, features, got)
		}
		if sum.Bytes < 63*rs || sum.Bytes > 65*rs {
			t.Errorf("record size %d: %d records make %d bytes, want about %d", rs, records, sum.Bytes, 64*rs)
		}
	}
	if got := recordsLabel(100 << 10); got != "100 KiB records" {
		t.Errorf("recordsLabel(100KiB) = %q", got)
	}
}
