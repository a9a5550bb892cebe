package mount_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/corgifs/corgifs/mount"
)

// A program mounts a dataset as corgifs mount does: options checked
// first, then opened, then served until unmounted.
func Example() {
	cfg := mount.Defaults()
	cfg.Source, cfg.Strategy, cfg.Parts = "/data/train", "corgipile", 8
	if err := cfg.Check(); err != nil {
		var oe *mount.OptionError
		if errors.As(err, &oe) {
			fmt.Println("option", oe.Option, "cannot work:", err)
		}
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ds, err := mount.Open(context.Background(), cfg, log)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ds.Close()
	srv, err := ds.Serve(context.Background(), "/mnt/train")
	if err != nil {
		fmt.Println(err)
		return
	}
	srv.Wait()
}
