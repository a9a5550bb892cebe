// Package portability holds the test that the packages meant to be used
// outside a FUSE mount (the record formats, the index and loader, the
// shuffler, the sources, the generators and the validator) build on
// systems other than Linux. Only fs, cmd and tests need Linux: the
// syscalls only Linux has live in _linux.go files, with fallbacks beside
// them.
package portability
