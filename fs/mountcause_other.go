//go:build !linux

package fs

func mountCause(bool) string { return "" }
