// Package poll is the one way a test waits for something to become true: polled at an
// interval that suits its bound, failing the test with what it waited for and the
// reason the condition last gave. A test never sleeps for a fixed time instead.
package poll

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// interval polls often enough that a short wait (a unit test's, in seconds) ends soon
// after its condition holds, and rarely enough that a long one (an API server's, in
// minutes) does not load what it reads.
func interval(timeout time.Duration) time.Duration {
	return min(max(timeout/600, 2*time.Millisecond), 250*time.Millisecond)
}

// Eventually fails t unless cond holds within timeout. cond says why not while it does
// not hold; the failure names what and the last reason.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), interval(timeout), timeout, true, func(context.Context) (bool, error) {
		ok, why := cond()
		last = why
		return ok, nil
	})
	if err != nil {
		if last == "" {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		t.Fatalf("%s: not within %s: %s", what, timeout, last)
	}
}

// True is Eventually for a condition with no reason to give.
func True(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, what, func() (bool, string) { return cond(), "" })
}

// NoError is Eventually for a condition that reads a server: its error is the reason
// it does not hold yet (an outage, an object not there yet), not the end of the wait.
func NoError(t testing.TB, timeout time.Duration, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	Eventually(t, timeout, what, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), max(timeout, time.Second))
		defer cancel()
		ok, err := cond(ctx)
		if err != nil {
			return false, err.Error()
		}
		return ok, ""
	})
}
