package feedback

import (
	"strings"
	"testing"
)

// TestStatusNamesTheUIDOfEveryAcceptedAndRefusedFile: status.json says who
// wrote each part and who was refused, so that an owner can tell a
// stranger's upload from their own.
func TestStatusNamesTheUIDOfEveryAcceptedAndRefusedFile(t *testing.T) {
	s, lb := newStore(t, Options{})
	u, err := s.BeginBy(1001, 0, 0, 2, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	u.WriteAt(file(Magic, 1, 2, 0, vectors(1, 2, 1)), 0)
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	u, err = s.BeginBy(1002, 0, 1, 2, []int32{1})
	if err != nil {
		t.Fatal(err)
	}
	u.WriteAt([]byte("junk"), 0)
	if err := u.Close(); err == nil {
		t.Fatal("a file without a header was accepted")
	}
	s.RefuseBy(1003, 0, -1, -1, "part-x.f32", "not a part")
	st := s.Status()
	if len(st.Parts) != 2 || st.Parts[0].UID != 1001 || st.Parts[0].State != stateAccepted || st.Parts[1].UID != 1002 || st.Parts[1].State != stateRefused {
		t.Fatalf("parts %+v: want part 0 accepted from uid 1001, part 1 refused from uid 1002", st.Parts)
	}
	var uids []uint32
	for _, r := range st.Refusals {
		uids = append(uids, r.UID)
	}
	if len(uids) != 2 || uids[0] != 1002 || uids[1] != 1003 {
		t.Fatalf("refusals from uids %v, want [1002 1003]", uids)
	}
	b, err := s.StatusJSON()
	if err != nil || !strings.Contains(string(b), `"uid": 1001`) {
		t.Fatalf("status.json %s (%v): want \"uid\": 1001", b, err)
	}
	if !strings.Contains(lb.String(), "uid=1002") {
		t.Fatalf("log does not name the refused uid:\n%s", lb.String())
	}
}
