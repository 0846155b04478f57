package queue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// A key is handled again after an error (with backoff) and after the time it asks
// for, and not again once done.
func TestWork_AnErrorRetriesAWaitLooksAgainDoneIsDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 10*time.Millisecond))
	defer q.ShutDown()
	var mu sync.Mutex
	calls := map[string]int{}
	done := make(chan string, 10)
	Work(ctx, q, 2, "test", func(_ context.Context, key string) (time.Duration, error) {
		mu.Lock()
		calls[key]++
		n := calls[key]
		mu.Unlock()
		switch {
		case key == "fails-once" && n == 1:
			return 0, errors.New("not yet")
		case key == "waits-once" && n == 1:
			return 5 * time.Millisecond, nil
		}
		done <- key
		return 0, nil
	})
	for _, k := range []string{"fails-once", "waits-once", "once"} {
		q.Add(k)
	}
	seen := map[string]bool{}
	for len(seen) < 3 {
		select {
		case k := <-done:
			seen[k] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("handled to completion: %v", seen)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["fails-once"] != 2 || calls["waits-once"] != 2 || calls["once"] != 1 {
		t.Errorf("calls = %v; want fails-once and waits-once twice, once once", calls)
	}
	if q.NumRequeues("fails-once") != 0 {
		t.Errorf("a key done after a failure keeps its backoff: %d requeues", q.NumRequeues("fails-once"))
	}
}
