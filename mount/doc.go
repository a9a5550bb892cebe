// Package mount opens and serves a corgifs mount: it is the composition
// root that turns a plain Config into a source, an index, a planner, a
// loader, a disk cache and a feedback store, and hands them to package fs.
// Every policy of a mount (the memory split, the index mode, the default
// block size and buffer, the checks of the options) lives here, so that
// the CLI, corgifstest, bench and validate share one implementation.
package mount
