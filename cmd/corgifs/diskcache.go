package main

import (
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
)

// diskCacheFlags are --disk-cache and --disk-cache-size of mount.
type diskCacheFlags struct {
	dir  string
	size diskSizeFlag
}

// diskSizeFlag is --disk-cache-size: a size, or a percentage of the free
// space of the cache's file system.
type diskSizeFlag struct {
	bytes   int64
	percent float64
}

func (s *diskSizeFlag) String() string {
	if s.bytes > 0 {
		return humanize.IBytes(uint64(s.bytes))
	}
	return strconv.FormatFloat(s.percent, 'g', -1, 64) + "%"
}

func (s *diskSizeFlag) Set(v string) error {
	if p, ok := strings.CutSuffix(strings.TrimSpace(v), "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || !(f > 0 && f <= 100) {
			return fmt.Errorf("want a percentage in (0, 100], such as 50%%")
		}
		*s = diskSizeFlag{percent: f}
		return nil
	}
	n, err := humanize.ParseBytes(v)
	if err != nil || n == 0 || n > 1<<60 {
		return fmt.Errorf("want a size such as 20GiB, or a percentage of the free space such as 50%%")
	}
	*s = diskSizeFlag{bytes: int64(n)}
	return nil
}

// absFlag is a path made absolute when given: a daemon may change its
// working directory.
type absFlag struct{ p *string }

func (a absFlag) String() string {
	if a.p == nil {
		return ""
	}
	return *a.p
}

func (a absFlag) Set(v string) error {
	if v == "" {
		*a.p = ""
		return nil
	}
	p, err := filepath.Abs(v)
	if err != nil {
		return err
	}
	*a.p = p
	return nil
}

func (f *diskCacheFlags) register(fs *flag.FlagSet) {
	f.size = diskSizeFlag{percent: 50}
	fs.Var(absFlag{&f.dir}, "disk-cache", "`dir`ectory where blocks read from the source are kept, checksummed, to be read from\n"+
		"there by later epochs and mounts (for S3 and slow shared file systems); owned by you and\n"+
		"writable by nobody else (created with mode 0700); one that cannot be written, or a full\n"+
		"disk, means no caching, with one log line. Default: no disk cache")
	fs.Var(&f.size, "disk-cache-size", "`size` the --disk-cache may hold, such as 20GiB, or a percentage such as 50% of the\n"+
		"space free in its file system at mount (the cache's own entries counted as free); past\n"+
		"it, the blocks the coming epochs read last, or never, are evicted first")
}
