package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/internal/testenv"
)

// writeFeedbackAs writes b to path as another user, through setpriv
// (util-linux): uid and gid, and the supplementary groups (none when
// groups is ""). It returns the writer's error output, "" on success.
func writeFeedbackAs(t *testing.T, uid, gid, groups, path string, b []byte) string {
	t.Helper()
	args := []string{"--reuid=" + uid, "--regid=" + gid}
	if groups == "" {
		args = append(args, "--clear-groups")
	} else {
		args = append(args, "--groups="+groups)
	}
	// tee's stdin is the file: the writer needs to read nothing of ours.
	// tee opens the file itself; a shell's redirection would dup it and
	// close the first descriptor, and the first close ends an upload.
	cmd := exec.Command("setpriv", append(args, "tee", path)...)
	cmd.Stdin = bytes.NewReader(b)
	var out bytes.Buffer
	cmd.Stderr = &out
	err := cmd.Run()
	if err == nil {
		return ""
	}
	if out.Len() == 0 {
		t.Fatalf("setpriv as uid %s: %v", uid, err)
	}
	return out.String()
}

// sharedMount mounts src with --allow-other and feedback, and lets every
// user reach the mount point (t.TempDir makes its directories 0700).
func sharedMount(t *testing.T, src string, flags ...string) *mount {
	t.Helper()
	if _, err := exec.LookPath("setpriv"); err != nil {
		testenv.Missing(t, "setpriv (util-linux), to write feedback as another user")
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root, to write feedback as another user")
	}
	m := feedbackMount(t, src, append(append([]string{"--allow-other", "--feedback-dim", "4"}, smallFlags...), flags...)...)
	for d := filepath.Dir(m.dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// TestAnotherUserCannotWriteFeedbackButTheOwnerCan: with --allow-other every
// local user reaches the mount, and an accepted feedback file is final (it
// fixes the next epoch's order), so a user who is neither the mount's
// owner nor root gets EACCES, status.json names their uid, and the
// owner's upload of the same part is accepted afterwards.
func TestAnotherUserCannotWriteFeedbackButTheOwnerCan(t *testing.T) {
	const n = 500
	src := genSynthetic(t, n, 8, 2, 1, "clustered")
	m := sharedMount(t, src)
	part := filepath.Join(m.dir, ".corgifs", "feedback", "epoch-0000", "part-00000-of-00001.f32")
	good := feedbackFile("CGFB", 1, 3, n)

	out := writeFeedbackAs(t, "65534", "65534", "", part, good)
	if !strings.Contains(out, "Permission denied") {
		t.Fatalf("uid 65534 writing feedback: got %q, want Permission denied (EACCES)\n%s", out, m.log)
	}
	// Not even a bad name tells another user anything but EACCES.
	if out := writeFeedbackAs(t, "65534", "65534", "", filepath.Join(filepath.Dir(part), "x"), nil); !strings.Contains(out, "Permission denied") {
		t.Errorf("uid 65534 creating a misnamed file: got %q, want Permission denied", out)
	}
	st := readFeedbackStatus(t, m)
	if st.Accepted != 0 || len(st.Refusals) != 2 {
		t.Fatalf("after uid 65534's writes: %+v, want nothing accepted and 2 refusals", st)
	}
	for _, r := range st.Refusals {
		if r.UID != 65534 || !strings.Contains(r.Reason, "uid 65534 may not write feedback: only the mount's owner (uid 0) and root may; mount with --feedback-group") {
			t.Errorf("refusal %+v: want uid 65534 and the reason naming --feedback-group", r)
		}
	}
	if !logSays(m, "uid 65534 may not write feedback") {
		t.Error("no log line names the refused uid")
	}

	if err := os.WriteFile(part, good, 0o644); err != nil {
		t.Fatalf("the owner's upload after the refusals: %v\n%s", err, m.log)
	}
	st = readFeedbackStatus(t, m)
	if st.Accepted != 1 || len(st.Parts) != 1 || st.Parts[0].State != "accepted" || st.Parts[0].UID != 0 {
		t.Fatalf("after the owner's upload: %+v, want part 0 accepted from uid 0", st)
	}
}

// TestFeedbackGroupLetsItsMembersWriteFeedback: --feedback-group opens
// the feedback tree to a group, whether it is a writer's primary group or
// a supplementary one; a user outside it still gets EACCES.
func TestFeedbackGroupLetsItsMembersWriteFeedback(t *testing.T) {
	const n = 500
	src := genSynthetic(t, n, 8, 2, 1, "clustered")
	m := sharedMount(t, src, "--feedback-group", "nogroup", "--parts", "2")
	dir := filepath.Join(m.dir, ".corgifs", "feedback", "epoch-0000")
	counts := []int{len(frames(t, m.read(0, 0, 2))), len(frames(t, m.read(0, 1, 2)))}
	part := func(i int) string { return filepath.Join(dir, partName(i, 2)) }

	if out := writeFeedbackAs(t, "65533", "1234", "", part(0), feedbackFile("CGFB", 1, 3, counts[0])); !strings.Contains(out, "Permission denied") {
		t.Fatalf("uid 65533 outside group 65534: got %q, want Permission denied\n%s", out, m.log)
	}
	if out := writeFeedbackAs(t, "65534", "65534", "", part(0), feedbackFile("CGFB", 1, 3, counts[0])); out != "" {
		t.Fatalf("uid 65534 of primary group 65534: %s\n%s", out, m.log)
	}
	if out := writeFeedbackAs(t, "65533", "1234", "65534", part(1), feedbackFile("CGFB", 1, 3, counts[1])); out != "" {
		t.Fatalf("uid 65533 with supplementary group 65534: %s\n%s", out, m.log)
	}
	st := readFeedbackStatus(t, m)
	if st.Accepted != 2 || len(st.Parts) != 2 || st.Parts[0].UID != 65534 || st.Parts[1].UID != 65533 {
		t.Fatalf("status %+v: want parts 0 and 1 accepted from uids 65534 and 65533", st)
	}
	if len(st.Refusals) != 1 || st.Refusals[0].UID != 65533 || !strings.Contains(st.Refusals[0].Reason, "members of group 65534 (--feedback-group)") {
		t.Fatalf("refusals %+v: want one, of uid 65533, naming group 65534", st.Refusals)
	}
}

// partName is the name of feedback part i of k.
func partName(i, k int) string { return fmt.Sprintf("part-%05d-of-%05d.f32", i, k) }

// TestFeedbackGroupIsRefusedWhereItCannotApply: --feedback-group without
// --allow-other (no other user reaches the mount), with a strategy that
// takes no feedback, or naming no group is an error that says so.
func TestFeedbackGroupIsRefusedWhereItCannotApply(t *testing.T) {
	src := genSynthetic(t, 100, 4, 2, 1, "shuffled")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"without --allow-other", []string{"--strategy", "grab", "--feedback-group", "nogroup"}, "--feedback-group nogroup needs --allow-other"},
		{"without feedback", []string{"--allow-other", "--feedback-group", "nogroup"}, "--feedback-group nogroup applies to the feedback strategies (grab, cdgrab, corgipile-balance) only, not corgipile"},
		{"no such group", []string{"--strategy", "grab", "--allow-other", "--feedback-group", "no-such-group-x"}, "--feedback-group no-such-group-x: no such group"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"mount", src, t.TempDir(), "--cache-dir", t.TempDir()}, c.args...)
			out, err := exec.Command(bin, args...).CombinedOutput()
			if err == nil {
				t.Fatalf("corgifs %s mounted:\n%s", strings.Join(args, " "), out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Errorf("output lacks %q:\n%s", c.want, out)
			}
		})
	}
}
