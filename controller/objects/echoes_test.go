package objects

import "testing"

// An event is an echo only at the resourceVersion the write returned, and only once;
// another version of the object (someone else's write after it) is not.
func TestEchoes_OnlyTheWritesOwnVersionIsAnEchoAndOnlyOnce(t *testing.T) {
	var e Echoes
	e.Wrote("ns/roots", "10")
	e.Wrote("ns/other", "11")
	e.Wrote("ns/other", "12") // a later write of the same object replaces the first
	e.Wrote("ns/none", "")    // a write that returned no version records nothing
	for _, tc := range []struct {
		name, key, rv string
		want          bool
	}{
		{"someone else's later write", "ns/roots", "13", false},
		{"the write's own event", "ns/roots", "10", true},
		{"the same event again (a resync)", "ns/roots", "10", false},
		{"an earlier write of a rewritten object", "ns/other", "11", false},
		{"the last write of a rewritten object", "ns/other", "12", true},
		{"an object never written", "ns/none", "", false},
	} {
		if got := e.Echo(tc.key, tc.rv); got != tc.want {
			t.Errorf("%s: Echo(%q, %q) = %v, want %v", tc.name, tc.key, tc.rv, got, tc.want)
		}
	}
	if len(e.rv) != 0 {
		t.Errorf("%d entries held after every echo was seen: %v", len(e.rv), e.rv)
	}
}
