package shuffler

import "testing"

func TestRecordsIsThePlansRecordCountForEveryStrategy(t *testing.T) {
	for _, strategy := range Strategies() {
		for _, equal := range []bool{false, true} {
			pl, err := NewPlanner(fixedIndex(), Params{Strategy: strategy, Seed: 7, Buffer: BufferSize{Percent: 30}, MaxMemory: 1 << 30, EqualParts: equal})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []int{1, 3, 7} {
				for epoch := range 3 {
					for i := range k {
						n, err := pl.Records(epoch, i, k)
						if err != nil {
							t.Fatal(err)
						}
						p, err := pl.Plan(epoch, i, k)
						if err != nil {
							t.Fatal(err)
						}
						if n != p.Records {
							t.Fatalf("%s equal=%v epoch %d part %d/%d: Records %d, the plan holds %d", strategy, equal, epoch, i, k, n, p.Records)
						}
					}
				}
			}
			if _, err := pl.Records(0, 3, 3); err == nil {
				t.Fatalf("%s: part 3 of 3 has a record count", strategy)
			}
		}
	}
}
