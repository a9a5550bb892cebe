package main

import (
	"log/slog"

	"golang.org/x/sys/unix"
)

// raiseOpenFileLimit raises the soft limit on open files to the hard limit.
// The loader keeps its source descriptors to a quarter of the soft limit,
// so a higher limit lets more files be read at once. The Go runtime raises
// it too on start, but says nothing; this says what the limit is.
func raiseOpenFileLimit(log *slog.Logger) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("could not read the open-file limit", "err", err)
		return
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			log.Warn("could not raise the open-file limit to the hard limit", "hard", lim.Max, "err", err)
			return
		}
	}
	log.Debug("open-file limit", "soft", lim.Cur, "hard", lim.Max)
}
