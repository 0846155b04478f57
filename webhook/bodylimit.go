package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
	"k8s.io/klog/v2"
)

// MaxReviewBytes is the largest admission review accepted: the API server's own
// request limit is 3 MiB and a review can carry an old and a new object.
const MaxReviewBytes = 6 << 20

// DefaultReviewBytesInFlight bounds the review bytes the webhook decodes and answers
// at once: two reviews of the largest size at a time, or some 750 ordinary ones. A
// review costs about five times its size in memory while it is decoded and answered;
// measured on the real binary (docs/benchmarks.md), 24 MiB let 32 concurrent largest
// reviews peak at 166 MiB, where unbounded they took 944 MiB.
const DefaultReviewBytesInFlight = 12 << 20

// receivingFactor sizes the budget of bytes still arriving (or arrived and waiting)
// against the budget of bytes being decoded: raw bytes cost only themselves, and
// room for several largest reviews arriving together keeps a burst from being turned
// away.
const receivingFactor = 2

// MaxBodyWait is the longest a review's body may take to arrive: the API server gives
// up on a webhook after its timeoutSeconds, at most 30 seconds, so a body still
// arriving after that has no one waiting for its answer.
const MaxBodyWait = 30 * time.Second

// minReviewWeight is what a review counts against the budget at least: its headers,
// buffers and response cost memory whatever its body.
const minReviewWeight = 16 << 10

// minGrowth is the least a body's buffer grows by, so a small body is read in one go.
const minGrowth = 4 << 10

// bodyBudget bounds the memory admission reviews take by bytes, not connections, in
// two stages, so that a slow sender cannot hold what fast senders need:
//
//   - receiving: a body is charged as its bytes arrive, chunk by chunk, never by the
//     length it declares. A connection that declares 6 MB and sends a byte a second
//     holds the few bytes it sent, and only until MaxBodyWait (or the review's own
//     timeout) ends it. When the receiving budget (receivingFactor times the decoding
//     budget) is spent, by a burst of large bodies say, a body gives back what it
//     holds and waits, in arrival order, for room for all of itself, then reads the
//     rest: no body ever waits while holding part of the budget, so none can wait on
//     another; one that finds no room before its deadline gets 503.
//   - decoding: a review whose body has fully arrived waits, in arrival order, for its
//     size in the decoding budget, which bounds the memory decoding and answering take
//     (about five times the size). Only complete bodies wait here, so the wait is
//     as long as other reviews take to be answered: milliseconds.
//
// Without the first stage, anyone who could reach the port held the budget for as long
// as they trickled (three such connections stopped all admission); without the second,
// 16 concurrent reviews of just under 6 MiB took the webhook to 278 MB. One over
// MaxReviewBytes is refused with 413 before its body is read.
type bodyBudget struct {
	decoding  *semaphore.Weighted
	receiving *semaphore.Weighted
	max       int64
	// waiting counts complete reviews waiting for the decoding budget; arriving, the
	// bytes charged to the receiving budget; receivingWaiters, the bodies waiting for
	// room to be received. The first two are served as gauges.
	waiting, arriving, receivingWaiters atomic.Int64
}

func newBodyBudget(bytesInFlight int64) *bodyBudget {
	return &bodyBudget{
		decoding:  semaphore.NewWeighted(bytesInFlight),
		receiving: semaphore.NewWeighted(receivingFactor * bytesInFlight),
		max:       bytesInFlight,
	}
}

// register serves the budget's state as gauges: a body budget under pressure shows as
// bytes arriving (slow or many senders) or reviews waiting (many large reviews).
func (b *bodyBudget) register(reg prometheus.Registerer) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "trustsync_webhook_arriving_review_bytes",
			Help: "Bytes of admission review bodies still arriving, or arrived and waiting to be decoded, charged against the receiving budget.",
		}, func() float64 { return float64(b.arriving.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "trustsync_webhook_reviews_waiting",
			Help: "Admission reviews whose body has arrived, waiting for room in the decoding budget (--max-review-bytes-in-flight).",
		}, func() float64 { return float64(b.waiting.Load()) }),
	)
}

// errReceivingFull is a body turned away because too many bytes were arriving until
// its deadline.
var errReceivingFull = errors.New("too many admission review bytes arriving at once; retry")

func (b *bodyBudget) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxReviewBytes {
			tooLarge(w, r.ContentLength)
			return
		}
		wait := bodyWait(r)
		// The connection's deadline ends a body that trickles, whatever the handler
		// does; a recorder in unit tests has no connection, and the read is bounded
		// by the caller there.
		deadline := time.Now().Add(wait)
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(deadline); err != nil && !errors.Is(err, http.ErrNotSupported) {
			klog.V(2).InfoS("Cannot bound the time an admission review's body takes", "err", err)
		}
		ctx, cancel := context.WithDeadline(r.Context(), deadline)
		defer cancel()
		body, charged, err := b.receive(ctx, r)
		defer func() { b.release(charged) }()
		if err == nil {
			// The body is in; the server's own timeouts govern the connection again
			// (a deadline left set would cancel the request once it passed).
			_ = rc.SetReadDeadline(time.Time{})
		}
		switch {
		case errors.Is(err, errReceivingFull):
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			klog.V(2).InfoS("Gave up on an admission review whose body was too slow", "path", r.URL.Path, "declared", r.ContentLength, "received", len(body), "within", wait)
			http.Error(w, fmt.Sprintf("the admission review's body did not arrive within %s (%d bytes received)", wait, len(body)), http.StatusRequestTimeout)
			return
		case err != nil:
			http.Error(w, fmt.Sprintf("cannot read the admission review: %v", err), http.StatusBadRequest)
			return
		case len(body) > MaxReviewBytes:
			tooLarge(w, int64(len(body)))
			return
		}
		weight := min(max(int64(len(body)), minReviewWeight), b.max)
		b.waiting.Add(1)
		err = b.decoding.Acquire(r.Context(), weight)
		b.waiting.Add(-1)
		if err != nil {
			klog.V(2).InfoS("Gave up on an admission review waiting for memory", "path", r.URL.Path, "bytes", len(body), "err", err)
			http.Error(w, "too many admission review bytes in flight; retry", http.StatusServiceUnavailable)
			return
		}
		defer b.decoding.Release(weight)
		// Decoding holds the body now, and the decoding budget counts it.
		b.release(charged)
		charged = 0
		r.Body, r.ContentLength = &receivedBody{Reader: bytes.NewReader(body), data: body}, int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// receivedBody is a body the budget has read whole: the review handler takes its bytes
// as they are rather than copy a review of up to 6 MiB a second time.
type receivedBody struct {
	*bytes.Reader
	data []byte
}

func (*receivedBody) Close() error { return nil }

// receive reads the body into a buffer that grows as bytes arrive, charging the
// receiving budget for each growth before making it: what a body holds is charged,
// never what it declares, and the charge stays within twice what arrived. It reads at
// most MaxReviewBytes+1 bytes, so an oversized body of unknown length is seen as
// such. charged is what the caller must release.
func (b *bodyBudget) receive(ctx context.Context, r *http.Request) (body []byte, charged int64, err error) {
	limit := MaxReviewBytes + 1
	if r.ContentLength >= 0 {
		limit = int(r.ContentLength)
	}
	for len(body) < limit {
		if len(body) == cap(body) {
			grown := slices.Grow(body, min(max(len(body), minGrowth), limit-len(body)))
			extra := int64(cap(grown) - cap(body))
			if !b.receiving.TryAcquire(extra) {
				// No room (or others already wait for it): give back what this body
				// holds and wait, holding nothing, for room for all of it.
				b.release(charged)
				charged = 0
				b.receivingWaiters.Add(1)
				err := b.receiving.Acquire(ctx, int64(limit))
				b.receivingWaiters.Add(-1)
				if err != nil {
					return body, 0, errReceivingFull
				}
				b.arriving.Add(int64(limit))
				charged, extra = int64(limit), 0
				grown = slices.Grow(body, limit-len(body))
			}
			b.arriving.Add(extra)
			charged += extra
			body = grown
		}
		n, err := r.Body.Read(body[len(body):min(cap(body), limit)])
		body = body[:len(body)+n]
		switch {
		case r.ContentLength >= 0 && len(body) < limit && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
			return body, charged, fmt.Errorf("the body ended after %d of the %d bytes it declared", len(body), r.ContentLength)
		case errors.Is(err, io.EOF):
			return body, charged, nil
		case err != nil:
			return body, charged, err
		}
	}
	return body, charged, nil
}

func (b *bodyBudget) release(n int64) {
	if n > 0 {
		b.receiving.Release(n)
		b.arriving.Add(-n)
	}
}

// bodyWait is how long the review's body may take: the timeout the API server sends
// with each webhook call (`?timeout=10s`), never more than MaxBodyWait.
func bodyWait(r *http.Request) time.Duration {
	if d, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && d > 0 && d < MaxBodyWait {
		return d
	}
	return MaxBodyWait
}

func tooLarge(w http.ResponseWriter, size int64) {
	if size < 0 || size > MaxReviewBytes {
		size = MaxReviewBytes + 1
	}
	http.Error(w, fmt.Sprintf("admission review of at least %d bytes is larger than the %d-byte limit", size, MaxReviewBytes), http.StatusRequestEntityTooLarge)
}
