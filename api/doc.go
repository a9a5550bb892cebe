// Package api declares the files a corgifs mount serves about itself, once:
// the layout of MNT/.corgifs (config.json, stats.json, the feedback tree)
// and the types their JSON decodes into. The file system writes them with
// these types, and the CLI, corgifstest and bench read them with the same
// ones, so that a field cannot mean one thing to the writer and another to
// a reader.
package api
