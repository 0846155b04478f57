package scrape

import (
	"math"
	"testing"
)

const before = `# TYPE d histogram
d_bucket{kind="a",le="0.001"} 1
d_bucket{kind="a",le="0.01"} 2
d_bucket{kind="a",le="0.1"} 2
d_bucket{kind="a",le="+Inf"} 2
d_sum{kind="a"} 0.005
d_count{kind="a"} 2
d_bucket{kind="b",le="0.001"} 0
d_bucket{kind="b",le="0.01"} 0
d_bucket{kind="b",le="0.1"} 0
d_bucket{kind="b",le="+Inf"} 0
d_sum{kind="b"} 0
d_count{kind="b"} 0
# TYPE c counter
c{kind="a"} 3
c{kind="b"} 4
`

// Of two scrapes, the histogram's difference holds what was observed in between, and
// a quantile is the upper bound of the bucket its rank falls in.
func TestHistogram_TheDifferenceOfTwoScrapesGivesTheQuantilesInBetween(t *testing.T) {
	after := `# TYPE d histogram
d_bucket{kind="a",le="0.001"} 1
d_bucket{kind="a",le="0.01"} 90
d_bucket{kind="a",le="0.1"} 101
d_bucket{kind="a",le="+Inf"} 102
d_sum{kind="a"} 2
d_count{kind="a"} 102
d_bucket{kind="b",le="0.001"} 7
d_bucket{kind="b",le="0.01"} 7
d_bucket{kind="b",le="0.1"} 7
d_bucket{kind="b",le="+Inf"} 7
d_sum{kind="b"} 0.001
d_count{kind="b"} 7
`
	m0, err := Parse(before)
	if err != nil {
		t.Fatal(err)
	}
	m1, err := Parse(after)
	if err != nil {
		t.Fatal(err)
	}
	a := map[string]string{"kind": "a"}
	d := m1.Histogram("d", a).Since(m0.Histogram("d", a))
	for _, tc := range []struct {
		q    float64
		want float64
	}{
		{0.5, 0.01},      // rank 50 of 100: the 88 new in (0.001, 0.01]
		{0.88, 0.01},     // the last of them
		{0.89, 0.1},      // rank 89
		{0.99, 0.1},      // rank 99 of 100
		{1, math.Inf(1)}, // the one past the last finite bucket
	} {
		if got := d.Quantile(tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if d.Count() != 100 {
		t.Errorf("Count() = %d, want the 100 observed in between", d.Count())
	}
	if got := (Histogram{}).Quantile(0.99); got != 0 {
		t.Errorf("an empty histogram's quantile = %v, want 0", got)
	}
	if got := m0.Sum("c", nil); got != 7 {
		t.Errorf("Sum(c) = %v, want 7 (both series)", got)
	}
	if got := m1.Sum("d", map[string]string{"kind": "b"}); got != 7 {
		t.Errorf("Sum(d, kind=b) = %v, want its count, 7", got)
	}
}
