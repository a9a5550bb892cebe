package api

import (
	"path/filepath"

	"github.com/corgifs/corgifs/shuffler"
)

// The names under a mount point that are not epochs: the control directory
// and its files. The feedback tree's part names are shuffler's
// (feedback.PartName), since they follow the served parts'.
const (
	// Dir is the control directory at the root of every mount.
	Dir = ".corgifs"
	// ConfigFile is Config, fixed for the life of the mount.
	ConfigFile = "config.json"
	// StatsFile is Stats, taken anew at each open.
	StatsFile = "stats.json"
	// FeedbackDir is the writable tree of a feedback strategy's mount.
	FeedbackDir = "feedback"
	// StatusFile, in FeedbackDir, says what feedback arrived and what was refused.
	StatusFile = "status.json"
	// FeedbackExt ends the name of a part's feedback file, written in
	// FeedbackDir/epoch-EEEE/part-IIIII-of-KKKKK.f32 (FeedbackPath).
	FeedbackExt = ".f32"
)

// ConfigPath is the config.json of the mount at mnt; a mount serves it as
// soon as it is ready, so waiting for it is waiting for the mount.
func ConfigPath(mnt string) string { return filepath.Join(mnt, Dir, ConfigFile) }

// StatsPath is the stats.json of the mount at mnt.
func StatsPath(mnt string) string { return filepath.Join(mnt, Dir, StatsFile) }

// StatusPath is the feedback status.json of the mount at mnt.
func StatusPath(mnt string) string { return filepath.Join(mnt, Dir, FeedbackDir, StatusFile) }

// FeedbackPath is the file a trainer writes the feedback of part i of k of
// epoch e to, in the mount at mnt: named as the served part, with
// FeedbackExt for its extension.
func FeedbackPath(mnt string, e, i, k int) string {
	return filepath.Join(mnt, Dir, FeedbackDir, shuffler.EpochName(e), shuffler.PartName(i, k, FeedbackExt))
}
