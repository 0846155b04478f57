package signer

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// seenAt remembers when the signer first saw each request it could act on, so that the
// time to its certificate is the signer's own share of an issuance (its queue, its
// client's rate limit, the grant check, signing and the write), apart from whoever
// created or approved the request and from the kubelet's pace. The workqueue's own
// metrics cannot say this: a key added again while queued, or requeued after an
// approval the signer itself wrote, restarts their clock.
//
// A request is remembered from its first actionable event until its outcome is
// written, it is found decided or gone, or it is deleted, so the map holds the
// requests in flight and no more.
type seenAt[K comparable] struct {
	clock clock.PassiveClock
	// waiting is set to how many requests are held: those the signer has yet to
	// decide, sign or write.
	waiting prometheus.Gauge
	mu      sync.Mutex
	at      map[K]time.Time
}

func newSeenAt[K comparable](c clock.PassiveClock, waiting prometheus.Gauge) *seenAt[K] {
	return &seenAt[K]{clock: c, waiting: waiting, at: map[K]time.Time{}}
}

// saw records now for key unless it was seen before.
func (s *seenAt[K]) saw(key K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.at[key]; !ok {
		s.at[key] = s.clock.Now()
		s.waiting.Set(float64(len(s.at)))
	}
}

// done forgets key and says how long ago it was first seen; ok is false for a key
// never seen (a request this replica did not watch arrive).
func (s *seenAt[K]) done(key K) (since time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.at[key]
	if !ok {
		return 0, false
	}
	delete(s.at, key)
	s.waiting.Set(float64(len(s.at)))
	return s.clock.Since(at), true
}
