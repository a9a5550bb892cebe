package api

import (
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/shuffler"
)

// Config is MNT/.corgifs/config.json: what a mount serves and how it was
// set up. Readers (corgifstest, bench, validate, the Python package) decode
// it with this type.
type Config struct {
	Version    int    `json:"version"`
	Source     string `json:"source"`
	Strategy   string `json:"strategy"`
	Seed       uint64 `json:"seed"`
	BlockSize  int64  `json:"block_size"`
	Buffer     string `json:"buffer"`
	BufferPart int64  `json:"buffer_bytes_per_part"` // for --parts parts
	Capped     bool   `json:"buffer_capped_by_max_memory"`
	MaxMemory  int64  `json:"max_memory"`
	Epochs     int    `json:"epochs"`
	Parts      int    `json:"parts"`
	EqualParts bool   `json:"equal_parts"`
	// Records repeated by --equal-parts in epoch 0 over the --parts parts.
	Padded int `json:"equal_parts_padding_epoch0"`
	// --partition and --exchange, for local and pls only.
	Partition string   `json:"partition,omitempty"`
	Exchange  *float64 `json:"exchange,omitempty"`
	// BalanceRule and FeedbackTimeout are the feedback strategies'
	// (grab, cdgrab, corgipile-balance).
	BalanceRule     string  `json:"balance_rule,omitempty"`
	FeedbackTimeout float64 `json:"feedback_timeout_seconds,omitempty"`
	Dataset         Dataset `json:"dataset"`
	// The records' format and what a reader of the served parts needs:
	// the parts' extension, whether they start with a CSV header row,
	// the size of fixed records. Parts of fixed records have no file
	// header (header_bytes 0); the sources' is source_header_bytes.
	Format            string `json:"format"`
	Extension         string `json:"extension"`
	Header            *bool  `json:"header,omitempty"`
	RecordSize        int64  `json:"record_size,omitempty"`
	HeaderBytes       *int64 `json:"header_bytes,omitempty"`
	SourceHeaderBytes int64  `json:"source_header_bytes,omitempty"`
	// Include is --include as given (absent: the format's globs), so that
	// a reader can list the same files (corgifs.order of a mount).
	Include []string `json:"include,omitempty"`

	// Sizing says whether block_size and buffer were given or chosen, and
	// why (package sizing; blocksize.go).
	Sizing *Sizing `json:"sizing,omitempty"`
	// Prefetch is --prefetch: the buffers each part loads ahead.
	Prefetch int `json:"prefetch"`
}

type Dataset struct {
	Files int `json:"files"`
	// Records is null when a probed index does not know it (Unknown).
	Records    *int64           `json:"records"`
	Bytes      int64            `json:"bytes"`
	Blocks     int              `json:"blocks"`
	RecordSize map[string]int64 `json:"record_size"`
	Skipped    Skipped          `json:"skipped_corrupt"`
	// Index is how the index was built: full or probe. A probed index
	// lists in Unknown the figures it does not know (null above):
	// "records" (learned as blocks load, never known to the planner) and
	// "record_size", but for formats of fixed-size records.
	Index   string   `json:"index"`
	Unknown []string `json:"unknown,omitempty"`
	// CountsKept is, for a probed index, how many files' record counts
	// were known at mount from an earlier mount's loads (index.FillCounts):
	// when it is every file with blocks, "records" is known and buffers
	// are served as they load.
	CountsKept int `json:"counts_kept_files,omitempty"`
}

type Skipped struct {
	Count  int            `json:"count"`
	Bytes  int64          `json:"bytes"`
	Ranges []index.Damage `json:"ranges"`
}

// Sizing is config.json's "sizing": what the block size and buffer rule
// chose and why.
type Sizing struct {
	BlockSizeGiven  bool    `json:"block_size_given"`
	BufferGiven     bool    `json:"buffer_given"`
	BlocksPerBuffer int64   `json:"blocks_per_buffer"`
	WholePart       bool    `json:"buffer_is_whole_part"`
	ExpectedTV      float64 `json:"expected_label_tv"`
	Reason          string  `json:"reason"`
	Warning         string  `json:"warning,omitempty"`
}

// NewConfig describes the mount of the index ix planned by pl, listing
// epochs epochs of parts parts. Sizing is left for the caller, which knows
// whether sizes were given or chosen.
func NewConfig(ix *index.Index, pl *shuffler.Planner, epochs, parts int) Config {
	p := pl.Params()
	target, capped := pl.BufferTarget(ix.Bytes / int64(parts))
	in := Config{
		Version: 1, Source: ix.Root, Strategy: p.Strategy, Seed: p.Seed, BlockSize: ix.BlockSize,
		Buffer: p.Buffer.String(), BufferPart: target, Capped: capped, MaxMemory: p.MaxMemory,
		Epochs: epochs, Parts: parts, EqualParts: p.EqualParts,
		Dataset: Dataset{
			Files: len(ix.Files), Records: &ix.Records, Bytes: ix.Bytes, Blocks: len(ix.Blocks), Index: IndexMode(ix),
			RecordSize: map[string]int64{"min": ix.RecordMin, "median": ix.RecordMedian, "max": ix.RecordMax},
			Skipped:    Skipped{Count: len(ix.Damaged), Ranges: ix.Damaged},
		},
	}
	if ix.Probed {
		in.Dataset.CountsKept = ix.CountsKept()
		if ix.CountsUnknown {
			in.Dataset.Records = nil
			in.Dataset.Unknown = append(in.Dataset.Unknown, "records")
		}
		if ix.RecordMax == 0 {
			in.Dataset.RecordSize = nil
			in.Dataset.Unknown = append(in.Dataset.Unknown, "record_size")
		}
	}
	if shuffler.IsFeedback(p.Strategy) {
		in.BalanceRule, in.FeedbackTimeout = p.BalanceRule.String(), p.FeedbackTimeout.Seconds()
	}
	if shuffler.Partitioned(p.Strategy) {
		in.Partition, in.Exchange = p.Partition, &p.Exchange
		if in.Partition == "" {
			in.Partition = shuffler.PartitionRandom
		}
	}
	f := ix.Fmt()
	in.Format, in.Extension = f.Name(), f.Ext()
	switch f := f.(type) {
	case formats.CSV:
		in.Header = &f.Header
	case formats.Fixed:
		in.RecordSize, in.HeaderBytes, in.SourceHeaderBytes = f.RecordSize, new(int64), f.HeaderBytes
	}
	if in.Dataset.Skipped.Ranges == nil {
		in.Dataset.Skipped.Ranges = []index.Damage{}
	}
	for _, d := range ix.Damaged {
		in.Dataset.Skipped.Bytes += d.To - d.From
	}
	if p.EqualParts {
		for i := range parts {
			if plan, err := pl.Plan(0, i, parts); err == nil {
				in.Padded += plan.Padding
			}
		}
	}
	return in
}

// IndexMode is how ix was built: index.IndexFull or IndexProbe.
func IndexMode(ix *index.Index) string {
	if ix.Probed {
		return index.IndexProbe
	}
	return index.IndexFull
}
