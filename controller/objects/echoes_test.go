package objects

import "testing"

// An event is an echo only at the resourceVersion the write returned, and only once;
// another version of the object (someone else's write after it) is not. An event that
// comes while the write is in flight waits for its response: the write's own version
// is an echo, another is a change the caller must look at.
func TestEchoes_OnlyTheWritesOwnVersionIsAnEchoAndOnlyOnce(t *testing.T) {
	var e Echoes
	write := func(key, rv string) bool { e.Writing(key); return e.Wrote(key, rv) }
	write("ns/roots", "10")
	write("ns/other", "11")
	write("ns/other", "12") // a later write of the same object replaces the first
	write("ns/failed", "")  // a write that failed records nothing
	for _, tc := range []struct {
		name, key, rv string
		want          bool
	}{
		{"someone else's later write", "ns/roots", "13", false},
		{"the write's own event", "ns/roots", "10", true},
		{"the same event again (a resync)", "ns/roots", "10", false},
		{"an earlier write of a rewritten object", "ns/other", "11", false},
		{"the last write of a rewritten object", "ns/other", "12", true},
		{"an object whose write failed", "ns/failed", "14", false},
		{"an object never written", "ns/none", "1", false},
	} {
		if got := e.Echo(tc.key, tc.rv); got != tc.want {
			t.Errorf("%s: Echo(%q, %q) = %v, want %v", tc.name, tc.key, tc.rv, got, tc.want)
		}
	}

	// In flight: the write's own event before its response.
	e.Writing("ns/fast")
	if !e.Echo("ns/fast", "20") {
		t.Error("an event while the write is in flight was not held")
	}
	if e.Wrote("ns/fast", "20") {
		t.Error("the write's own event, come before its response, was taken for a change")
	}
	// In flight: someone else's change, then the write's own event.
	e.Writing("ns/raced")
	e.Echo("ns/raced", "30")
	if !e.Wrote("ns/raced", "31") {
		t.Error("another's change that came while the write was in flight was lost")
	}
	if !e.Echo("ns/raced", "31") {
		t.Error("the write's own event after its response was not an echo")
	}
	if len(e.at) != 0 {
		t.Errorf("%d entries held after every echo was seen: %v", len(e.at), e.at)
	}
}
