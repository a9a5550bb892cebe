package main

import (
	"fmt"
	"os/user"
	"strconv"
)

// feedbackGroup resolves --feedback-group: "" (no group: only the mount's
// owner and root write feedback), a numeric GID or a group name. The
// group matters only where other users reach the mount, so it needs
// --allow-other and a strategy that takes feedback.
func (d *datasetFlags) feedbackGroup(v string, allowOther bool) (*uint32, error) {
	if v == "" {
		return nil, nil
	}
	if !d.takesFeedback() {
		return nil, fmt.Errorf("--feedback-group %s applies to the feedback strategies (grab, cdgrab, corgipile-balance) only, not %s", v, d.strategy)
	}
	if !allowOther {
		return nil, fmt.Errorf("--feedback-group %s needs --allow-other: without it no user but the mount's owner reaches the mount", v)
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		g := uint32(n)
		return &g, nil
	}
	g, err := user.LookupGroup(v)
	if err != nil {
		return nil, fmt.Errorf("--feedback-group %s: no such group (%v): give a group name from /etc/group or a numeric GID", v, err)
	}
	n, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("--feedback-group %s: group id %q is not numeric", v, g.Gid)
	}
	gid := uint32(n)
	return &gid, nil
}
