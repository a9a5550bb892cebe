package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/corgifs/corgifs/api"

	"github.com/corgifs/corgifs/internal/childmount"
)

// childMount is a `corgifs mount` run as a child process. Commands that
// read a mount serve it from another process: reading a FUSE mount from the
// process that serves it can deadlock.
type childMount struct {
	*childmount.Child
	ext    string // of the part files, from the mount's config.json
	config []byte // its config.json
	log    *os.File
}

// startChildMount mounts src at a new directory under work with the given
// mount flags and waits until it serves. Its log is next to the mount
// point, in mnt-….log.
func startChildMount(src, work string, flags ...string) (*childMount, error) {
	mnt, err := os.MkdirTemp(work, "mnt-")
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(mnt + ".log")
	if err != nil {
		return nil, err
	}
	c, err := childmount.Start(context.Background(), childmount.Config{
		Argv:    append([]string{self, "mount", src, mnt}, flags...),
		Dir:     mnt,
		Log:     log,
		Timeout: 5 * time.Minute, // indexing a large source takes time
	})
	if err != nil {
		log.Close()
		out, _ := os.ReadFile(log.Name())
		return nil, fmt.Errorf("corgifs mount: %w\n%s", err, out)
	}
	m := &childMount{Child: c, log: log}
	b, err := os.ReadFile(api.ConfigPath(mnt))
	var cfg api.Config
	if err == nil {
		err = json.Unmarshal(b, &cfg)
	}
	if err != nil {
		m.stop()
		return nil, fmt.Errorf("%s/.corgifs/config.json: %w", mnt, err)
	}
	m.ext = cmp.Or(cfg.Extension, ".tfrecord") // mounts before formats served TFRecord
	m.config = b
	return m, nil
}

// stop unmounts, waits for the daemon to exit and checks that it exited 0
// and left nothing mounted.
func (m *childMount) stop() error {
	defer m.log.Close()
	if err := m.Stop(10 * time.Second); err != nil {
		return fmt.Errorf("corgifs mount at %s: %w (log: %s)", m.Dir, err, m.log.Name())
	}
	return nil
}

// warnings returns the warnings the mount logged so far, each its message
// and attributes (the log line without its time and level).
func (m *childMount) warnings() []string {
	b, err := os.ReadFile(m.log.Name())
	if err != nil {
		return []string{fmt.Sprintf("could not read the mount's log %s: %v", m.log.Name(), err)}
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if _, rest, ok := strings.Cut(line, " level=WARN "); ok {
			out = append(out, rest)
		}
	}
	return out
}
