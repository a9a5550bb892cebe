package corgifs

// Version is the release of corgifs, the one place it is written: bump it
// with a new section of CHANGELOG.md. The release builder (release/)
// reads it for the archive and package names; `corgifs --version` shows
// it. It is a variable, not a constant, only so that a build may stamp
// another with -ldflags "-X github.com/corgifs/corgifs.Version=...".
var Version = "0.1.0"
