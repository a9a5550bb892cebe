//go:build !unix

package blockcache

// poolSize returns the descriptors the pool may hold: without an
// open-file limit to read, the most it ever holds.
func poolSize() int { return maxPoolFiles }
