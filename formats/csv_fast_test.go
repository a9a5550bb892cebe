package formats

import (
	"fmt"
	"testing"
)

// The fast path for rows without quotes must cut every row, and count its
// fields, exactly as the full parser does: at every prefix of inputs with
// and without quotes, CRLF, empty fields and a last row without "\n",
// whether more data may follow or not.
func TestRowsWithoutQuotesAreCutAsTheFullParserCutsThem(t *testing.T) {
	inputs := []string{
		"",
		"a,b,c\n1,2,3\n",
		"id,label,f0\r\n1,0,0.5\r\n2,1,-1e-3",
		",,\n,\n\n",
		"1,2\n3,\"4\"\n5,6\n",
		"1,\"two\nlines\",3\n4,5,6\n",
		"x,y\"z\n1,2\n",
		"a,\"\"\"q\"\"\",b\r\nc,d,e",
		"\"open,\n1,2\n",
		"plain without a line end",
		"\r\n\r",
	}
	for _, in := range inputs {
		data := []byte(in)
		for end := 0; end <= len(data); end++ {
			for from := 0; from <= end; from++ {
				for _, atEOF := range []bool{false, true} {
					p := data[from:end]
					n, f, err := cutCSV(p, atEOF)
					wn, wf, werr := cutQuotedCSV(p, atEOF)
					if n != wn || f != wf || fmt.Sprint(err) != fmt.Sprint(werr) {
						t.Fatalf("cut of %q (atEOF %v): %d bytes, %d fields, %v; the full parser: %d, %d, %v",
							p, atEOF, n, f, err, wn, wf, werr)
					}
				}
			}
		}
	}
}
