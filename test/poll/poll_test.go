package poll

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// recorder is a testing.TB that records a failure instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r) // ends the wait, as Fatalf's Goexit would
}

// run calls f with a recorder, returning what it failed with ("" when it did not).
func run(f func(tb testing.TB)) (failed string) {
	r := &recorder{}
	defer func() {
		if p := recover(); p != nil && p != any(r) {
			panic(p)
		}
		failed = r.failed
	}()
	f(r)
	return ""
}

func TestEventually_ReturnsOnceTheConditionHoldsAndFailsWithItsLastReason(t *testing.T) {
	calls := 0
	if failed := run(func(tb testing.TB) {
		True(tb, 5*time.Second, "the third call", func() bool { calls++; return calls == 3 })
	}); failed != "" || calls != 3 {
		t.Errorf("a condition that holds at the third call: failed %q after %d calls", failed, calls)
	}
	failed := run(func(tb testing.TB) {
		Eventually(tb, 20*time.Millisecond, "the impossible", func() (bool, string) { return false, "still 2 of 3" })
	})
	if failed != "the impossible: not within 20ms: still 2 of 3" {
		t.Errorf("a condition that never holds failed with %q", failed)
	}
	failed = run(func(tb testing.TB) {
		NoError(tb, 20*time.Millisecond, "a server's answer", func(context.Context) (bool, error) { return false, errors.New("connection refused") })
	})
	if failed != "a server's answer: not within 20ms: connection refused" {
		t.Errorf("a server that never answers failed with %q", failed)
	}
}

func TestInterval_SuitsTheBound(t *testing.T) {
	for _, tc := range []struct {
		timeout, want time.Duration
	}{
		{time.Second, 2 * time.Millisecond},
		{10 * time.Second, 16666666},
		{time.Minute, 100 * time.Millisecond},
		{10 * time.Minute, 250 * time.Millisecond},
	} {
		if got := interval(tc.timeout); got != tc.want {
			t.Errorf("interval(%s) = %s, want %s", tc.timeout, got, tc.want)
		}
	}
}
