package main

import (
	"context"
	"errors"
)

// buildDeb is the Debian package; see deb.go.
func buildDeb(ctx context.Context, c config, arch, dir string) (string, error) {
	return "", errors.New("the Debian package is not built yet: pass -deb=false")
}
