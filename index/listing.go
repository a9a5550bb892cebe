package index

import (
	"context"
	"log/slog"

	"github.com/corgifs/corgifs/source"
)

// SourceBytes returns the bytes of the files an index of src built with o
// would cover, from a listing alone (no file is read): what the default
// block size and buffer are chosen from before indexing (package sizing).
// A compressed file counts its stored bytes, a lower bound of the
// decompressed stream its blocks are cut from.
func SourceBytes(ctx context.Context, src source.Source, o Options) (int64, error) {
	o.fill()
	// The listing of Build logs what it skips; this one stays quiet, so
	// that each is said once.
	o.Logger = slog.New(slog.DiscardHandler)
	files, _, err := selectFiles(ctx, src, o)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, f := range files {
		n += f.Size
	}
	return n, nil
}
