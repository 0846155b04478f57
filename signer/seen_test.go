package signer

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	clocktesting "k8s.io/utils/clock/testing"
)

// The signer's clock for a request starts at the first event that shows it and stops
// when its outcome is written: later events (its own approval's, a resync's) do not
// restart it, and a request done is forgotten, so only requests in flight are held.
func TestSeenAt_TheFirstEventStartsTheClockAndDoneForgets(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_000, 0))
	waiting := prometheus.NewGauge(prometheus.GaugeOpts{Name: "waiting"})
	s := newSeenAt[string](clk, waiting)

	s.saw("a")
	clk.SetTime(clk.Now().Add(40 * time.Millisecond))
	s.saw("a") // the approval the signer wrote comes back as an update
	s.saw("b")
	clk.SetTime(clk.Now().Add(10 * time.Millisecond))
	if n := testutil.ToFloat64(waiting); n != 2 {
		t.Errorf("%v requests waiting, want a and b", n)
	}

	for _, tc := range []struct {
		key    string
		want   time.Duration
		wantOK bool
	}{
		{"a", 50 * time.Millisecond, true},
		{"b", 10 * time.Millisecond, true},
		{"a", 0, false},     // done once: a second outcome is not measured again
		{"never", 0, false}, // arrived before this replica watched
	} {
		got, ok := s.done(tc.key)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("done(%q) = %v, %v; want %v, %v", tc.key, got, ok, tc.want, tc.wantOK)
		}
	}
	if n := testutil.ToFloat64(waiting); n != 0 || len(s.at) != 0 {
		t.Errorf("%v requests waiting (%d held) after all were done", n, len(s.at))
	}
}
