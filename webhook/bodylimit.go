package webhook

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"golang.org/x/sync/semaphore"
	"k8s.io/klog/v2"
)

// MaxReviewBytes is the largest admission review accepted: the API server's own
// request limit is 3 MiB and a review can carry an old and a new object.
const MaxReviewBytes = 6 << 20

// DefaultReviewBytesInFlight bounds the review bytes the webhook holds at once: two
// reviews of the largest size at a time, or some 750 ordinary ones. A review costs
// about five times its size in memory while it is decoded and answered; measured on
// the real binary (docs/benchmarks.md), 24 MiB let 32 concurrent largest reviews peak
// at 166 MiB, where unbounded they took 944 MiB.
const DefaultReviewBytesInFlight = 12 << 20

// minReviewWeight is what a review counts against the budget at least: its headers,
// buffers and response cost memory whatever its body.
const minReviewWeight = 16 << 10

// bodyBudget bounds the memory admission reviews take by the bytes in flight, not
// the number of connections: without it, anyone who can reach the port could send
// enough concurrent large reviews to have a fail-closed webhook OOM-killed (16 of
// just under 6 MiB took it to 278 MB). A review waits for room (the API server gives
// up after the webhook's timeout); one over MaxReviewBytes is refused with 413 before
// its body is read.
type bodyBudget struct {
	sem *semaphore.Weighted
	max int64
}

func newBodyBudget(bytesInFlight int64) *bodyBudget {
	return &bodyBudget{sem: semaphore.NewWeighted(bytesInFlight), max: bytesInFlight}
}

func (b *bodyBudget) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxReviewBytes {
			tooLarge(w, r.ContentLength)
			return
		}
		// A body of unknown length may be as large as any.
		weight := r.ContentLength
		if weight < 0 {
			weight = MaxReviewBytes
		}
		weight = min(max(weight, minReviewWeight), b.max)
		if err := b.sem.Acquire(r.Context(), weight); err != nil {
			klog.V(2).InfoS("Gave up on an admission review waiting for memory", "path", r.URL.Path, "bytes", r.ContentLength, "err", err)
			http.Error(w, "too many admission review bytes in flight; retry", http.StatusServiceUnavailable)
			return
		}
		defer b.sem.Release(weight)
		// A declared length was checked above and the server reads no further than it;
		// only a body of unknown length is read here first, to answer 413 rather than
		// the admission library's 400, so the API server's reviews (always declared)
		// are not copied twice.
		if r.ContentLength < 0 {
			body, err := io.ReadAll(io.LimitReader(r.Body, MaxReviewBytes+1))
			if err != nil {
				http.Error(w, fmt.Sprintf("cannot read the admission review: %v", err), http.StatusBadRequest)
				return
			}
			if len(body) > MaxReviewBytes {
				tooLarge(w, int64(len(body)))
				return
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		next.ServeHTTP(w, r)
	})
}

func tooLarge(w http.ResponseWriter, size int64) {
	if size < 0 || size > MaxReviewBytes {
		size = MaxReviewBytes + 1
	}
	http.Error(w, fmt.Sprintf("admission review of at least %d bytes is larger than the %d-byte limit", size, MaxReviewBytes), http.StatusRequestEntityTooLarge)
}
