//go:build linux

package main

import (
	"context"
	"encoding/binary"
	"io"
	"os"
	"testing"

	"github.com/corgifs/corgifs/api"
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

// TestDatasetRecordsAreTheWrittenCountWhenAProbedIndexDoesNotKnowThem checks
// the record count the --s3 report's "a GET per record" row uses: with
// config.json's records null (a probed index before its blocks load) it is
// the number of TFRecord frames in the files written, and a config.json that
// counts otherwise is an error, not a silently wrong row.
func TestDatasetRecordsAreTheWrittenCountWhenAProbedIndexDoesNotKnowThem(t *testing.T) {
	d, err := ensureDataset(context.Background(), t.TempDir(), 64<<10, 1<<10, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var frames int64
	for _, p := range d.paths() {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		// TFRecord frames: length (8), its CRC (4), payload, CRC (4).
		for off := 0; off < len(b); off += int(binary.LittleEndian.Uint64(b[off:])) + 16 {
			frames++
		}
	}
	if frames < dataFiles {
		t.Fatalf("the dataset holds %d records, want at least one a file", frames)
	}

	var probed api.Config // Dataset.Records nil, as a probed index writes it
	if got, err := d.records(probed); err != nil || got != frames {
		t.Errorf("records with config.json's null = %d, %v; want the %d records written", got, err, frames)
	}
	full := api.Config{}
	full.Dataset.Records = &frames
	if got, err := d.records(full); err != nil || got != frames {
		t.Errorf("records with config.json's %d = %d, %v", frames, got, err)
	}
	other := frames + 1
	full.Dataset.Records = &other
	if _, err := d.records(full); err == nil {
		t.Errorf("records with config.json counting %d of %d records: no error", other, frames)
	}
}
