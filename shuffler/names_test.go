package shuffler

import "testing"

func TestPartNamesHaveOneSpellingAndCarryTheFormatsExtension(t *testing.T) {
	for _, ext := range []string{".tfrecord", ".csv", ".tar", ".npy"} {
		for _, c := range [][2]int{{0, 1}, {7, 8}, {99999, 100000}, {3, 123456}} {
			name := PartName(c[0], c[1], ext)
			i, k, ok := ParsePartName(name, ext)
			if !ok || i != c[0] || k != c[1] {
				t.Fatalf("%s parses as %d, %d, %v", name, i, k, ok)
			}
		}
	}
	if PartName(3, 8, ".csv") != "part-00003-of-00008.csv" {
		t.Fatalf("PartName(3, 8, .csv) = %s", PartName(3, 8, ".csv"))
	}
	for _, bad := range []string{"part-00000-of-00001.tfrecord", "part-0-of-1.csv", "part-00001-of-00001.csv", "part-00000-of-00000.csv",
		"part--0001-of-00002.csv", "part-00000-of-00001.csvx", "part-+0000-of-00001.csv", "xpart-00000-of-00001.csv", "part-00000-of-00001"} {
		if _, _, ok := ParsePartName(bad, ".csv"); ok {
			t.Fatalf("%q parsed as a .csv part name", bad)
		}
	}
}
