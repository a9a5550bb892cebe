// Package corgifs is the root of the corgifs module: a read-only FUSE file
// system for machine-learning training data that serves every epoch's
// records in a CorgiPile order (random large blocks, shuffled inside a
// memory buffer) from a local directory or an S3 prefix. The commands are
// in cmd/ (corgifs, the daemon and its tools; corgifs-plot, which draws
// validate's and herding's reports); see README.md.
//
// This package holds only what every build shares: the release version.
//
// corgifs is licensed under the Apache License, Version 2.0: see the
// LICENSE file at the root of the module, or
// https://www.apache.org/licenses/LICENSE-2.0.
package corgifs
