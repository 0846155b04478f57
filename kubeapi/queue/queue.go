// Package queue is the one shape of a controller's work loop in trustsync (the
// signer's CAs, CSRs and PodCertificateRequests, the TrustTargets and the annotated
// objects): take a key, handle it, and say what comes next. Apart from kubeapi so that
// the sidecar, which runs no workqueue, does not link one.
package queue

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// New is a controller's queue as every trustsync controller makes it: client-go's
// controller rate limiter (per-key exponential backoff, overall token bucket), and
// name, which its workqueue metrics carry (trustsync_<part>).
func New[K comparable](name string) workqueue.TypedRateLimitingInterface[K] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[K](), workqueue.TypedRateLimitingQueueConfig[K]{Name: name})
}

// Handle handles one key. An error retries it with the queue's backoff; a positive
// duration looks again after it (waiting on something that is not the key's fault,
// which must not grow the backoff); otherwise the key is done until it is added again.
type Handle[K comparable] func(ctx context.Context, key K) (after time.Duration, err error)

// Work runs workers goroutines taking keys from q until it shuts down (ctx done).
// what names the kind of key in the log of a failure.
func Work[K comparable](ctx context.Context, q workqueue.TypedRateLimitingInterface[K], workers int, what string, handle Handle[K]) {
	for range workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) { work(ctx, q, what, handle) }, time.Second)
	}
}

func work[K comparable](ctx context.Context, q workqueue.TypedRateLimitingInterface[K], what string, handle Handle[K]) {
	for {
		key, shutdown := q.Get()
		if shutdown {
			return
		}
		after, err := handle(ctx, key)
		switch {
		case err != nil:
			klog.FromContext(ctx).Error(err, "Cannot handle; retrying with backoff", "kind", what, "key", fmt.Sprint(key))
			q.AddRateLimited(key)
		case after > 0:
			q.Forget(key)
			q.AddAfter(key, after)
		default:
			q.Forget(key)
		}
		q.Done(key)
	}
}
