package signer

import (
	"crypto/x509"
	"time"

	"github.com/trustsync/trustsync/bundle"
)

// caState is one signer's CA state, as its Secret holds it.
//
// Rotation is trust before use. When the current CA reaches its rotation point (or an
// operator asks), the next CA is created and published beside the current one; only
// once it has been published for the propagation window does it start signing. The old
// CA is then retired: still published, signing nothing, until nothing it signed can be
// valid any more. Every step is saved in the Secret before the next is taken, so a
// crash at any point resumes where it stopped.
type caState struct {
	Current *CA
	// Next is published but does not sign until NextPublishedAt + the window.
	Next *CA
	// NextPublishedAt is zero until Next's anchor has been published.
	NextPublishedAt time.Time
	Retired         []retiredAnchor
	// Managed: trustsync generated this CA and rotates it. A CA brought in a
	// kubernetes.io/tls Secret (cert-manager's, say) is rotated by its owner.
	Managed bool
	// RotateRequested is the operator's trustsync.io/rotate-requested-at; RotateHandled
	// the last such request acted on.
	RotateRequested, RotateHandled string
	// AnchorsChangedAt is when anchors() last changed (a next CA created, a retired
	// one dropped): the bundle endpoint's sequence, the same on every replica and
	// after a restart. Zero in a Secret written before it was kept.
	AnchorsChangedAt time.Time
	// SkipPods are the pods an operator told a waiting rotation not to wait for
	// (trustsync.io/rotation-skip-pods: namespace/pod or namespace/*).
	SkipPods []string
	// Unused are the keeper keys whose anchors advance dropped: no CA still trusted
	// needs them. Not saved: the signer says so once, and never destroys a key.
	Unused []string
}

// retiredAnchor is a former CA that signs nothing but is still trusted until Until,
// by when every certificate it signed has expired.
type retiredAnchor struct {
	Cert  *x509.Certificate
	Until time.Time
	// KeyRef is where its key lives in the keeper ("" when the Secret held it): kept,
	// never used to sign, until the anchor goes.
	KeyRef string
}

// rotation holds the rotation settings.
type rotation struct {
	// RotateAt is the fraction of a CA's lifetime at which its successor is created.
	RotateAt float64
	// Window is how long a new anchor is published before its CA signs, when
	// propagation is timed.
	Window time.Duration
	// Propagation is PropagationObserved or PropagationTimed. Observed: the new CA
	// signs once every pod selecting the signer's bundle is seen holding its anchor,
	// or once MaxWait has passed since it was published.
	Propagation Propagation
	MaxWait     time.Duration
	// MinWait is the least a new CA waits even when every pod was seen holding it:
	// peers importing the bundle from the bundle endpoint are not observed, only
	// given time to fetch (zero without an endpoint).
	MinWait time.Duration
	// Floor is the least a new CA waits, under observed propagation, when some
	// consumer cannot be observed or none is observed at all.
	Floor time.Duration
	// Validity is a generated CA's lifetime.
	Validity time.Duration
	// MaxLeafLifetime is the longest certificate the signer issues (policy maximum),
	// which bounds how long a retired anchor must stay.
	MaxLeafLifetime time.Duration
}

// DefaultMinWait is the floor's default: the kubelet refreshes a configMap or secret
// volume at its sync period (a minute) plus its cache's TTL (another), at worst.
const DefaultMinWait = 2 * time.Minute

// Propagation is how a rotation decides that the new anchor has reached the pods.
type Propagation string

const (
	// PropagationObserved waits until the nodes' reports show every pod selecting the
	// signer's bundle holding the new anchor (or MaxWait passes).
	PropagationObserved Propagation = "observed"
	// PropagationTimed waits a fixed window.
	PropagationTimed Propagation = "timed"
)

// Phase names where a rotation stands, for logs and metrics.
type Phase string

const (
	PhaseStable     Phase = bundle.RotationStable // one signing CA, nothing pending
	PhasePublishing Phase = "Publishing"          // next CA created, its anchor not yet published
	PhaseWaiting    Phase = "Waiting"             // next anchor published, waiting out the window
)

func (s *caState) phase() Phase {
	switch {
	case s.Next == nil:
		return PhaseStable
	case s.NextPublishedAt.IsZero():
		return PhasePublishing
	default:
		return PhaseWaiting
	}
}

// anchors are the certificates that must be published now: the signing CA's, the
// next one's, and every retired one still needed.
func (s *caState) anchors() []*x509.Certificate {
	out := []*x509.Certificate{s.Current.Anchor()}
	if s.Next != nil {
		out = append(out, s.Next.Anchor())
	}
	for _, r := range s.Retired {
		out = append(out, r.Cert)
	}
	return out
}

// propagated says whether a next CA published at publishedAt may sign at now.
func (r rotation) propagated(publishedAt, now time.Time, observed bool) bool {
	if r.Propagation == PropagationObserved && observed && !now.Before(publishedAt.Add(r.MinWait)) {
		return true
	}
	return !now.Before(publishedAt.Add(r.wait()))
}

// wait is the longest a published next CA waits before it signs.
func (r rotation) wait() time.Duration {
	if r.Propagation == PropagationObserved {
		return r.MaxWait
	}
	return r.Window
}

func (r rotation) rotateAt(ca *CA) time.Time {
	life := ca.Cert.NotAfter.Sub(ca.Cert.NotBefore)
	return ca.Cert.NotBefore.Add(time.Duration(float64(life) * r.RotateAt))
}

// advance takes every step that is due at now and reports whether the state changed
// (and must be saved) and when the next step falls due (zero: none scheduled). newCA
// makes a CA; tests inject it. Publishing is not a step here: the caller publishes
// anchors() and then calls markPublished. propagated says whether every pod selecting
// the signer's bundle was observed holding the next anchor (observed propagation).
func (s *caState) advance(now time.Time, r rotation, propagated bool, newCA func(time.Time) (*CA, error)) (changed bool, next time.Time, err error) {
	// Retired anchors nothing valid depends on any more are dropped.
	kept := s.Retired[:0]
	for _, ra := range s.Retired {
		if now.Before(ra.Until) && now.Before(ra.Cert.NotAfter) {
			kept = append(kept, ra)
		} else {
			changed = true
			s.anchorsChanged(now)
			if ra.KeyRef != "" {
				s.Unused = append(s.Unused, ra.KeyRef)
			}
		}
	}
	s.Retired = kept

	requested := s.RotateRequested != "" && s.RotateRequested != s.RotateHandled
	if requested && !s.Managed {
		// The owner of a brought-in CA rotates it; note the request as seen.
		s.RotateHandled, changed = s.RotateRequested, true
	}
	if s.Managed && s.Next == nil && (requested || !now.Before(r.rotateAt(s.Current))) {
		if s.Next, err = newCA(now); err != nil {
			return changed, time.Time{}, err
		}
		s.NextPublishedAt, s.RotateHandled, changed = time.Time{}, s.RotateRequested, true
		s.anchorsChanged(now)
	}

	if s.Next != nil && !s.NextPublishedAt.IsZero() && r.propagated(s.NextPublishedAt, now, propagated) {
		until := now.Add(r.MaxLeafLifetime + backdate)
		if old := s.Current.Anchor(); old.NotAfter.Before(until) {
			until = old.NotAfter
		}
		s.Retired = append(s.Retired, retiredAnchor{Cert: s.Current.Anchor(), Until: until, KeyRef: s.Current.KeyRef})
		s.Current, s.Next, s.NextPublishedAt = s.Next, nil, time.Time{}
		changed = true
	}
	return changed, s.nextDeadline(r), nil
}

// anchorsChanged records that anchors() changed at now, keeping the record strictly
// increasing in whole seconds (a sequence number must move on every change).
func (s *caState) anchorsChanged(now time.Time) {
	at := now.Truncate(time.Second)
	if !at.After(s.AnchorsChangedAt) {
		at = s.AnchorsChangedAt.Truncate(time.Second).Add(time.Second)
	}
	s.AnchorsChangedAt = at
}

// sequence is the bundle endpoint's spiffe_sequence for these anchors: when they last
// changed, in seconds since the epoch. A brought-in CA (whose owner replaces it in the
// Secret) or a Secret without the record counts from its anchors' NotBefore, which a
// new CA moves forward.
func (s *caState) sequence() uint64 {
	at := s.AnchorsChangedAt
	for _, a := range s.anchors() {
		if a.NotBefore.After(at) {
			at = a.NotBefore
		}
	}
	return uint64(max(at.Unix(), 0))
}

// markPublished records that anchors() has been published at now, which starts the
// next CA's propagation window.
func (s *caState) markPublished(now time.Time) bool {
	if s.Next != nil && s.NextPublishedAt.IsZero() {
		s.NextPublishedAt = now
		return true
	}
	return false
}

// nextDeadline is the earliest time a step falls due.
func (s *caState) nextDeadline(r rotation) time.Time {
	var deadlines []time.Time
	switch {
	case s.Next != nil && !s.NextPublishedAt.IsZero():
		deadlines = append(deadlines, s.NextPublishedAt.Add(r.wait()))
	case s.Next == nil && s.Managed:
		deadlines = append(deadlines, r.rotateAt(s.Current))
	}
	for _, ra := range s.Retired {
		deadlines = append(deadlines, ra.Until)
	}
	var earliest time.Time
	for _, d := range deadlines {
		if earliest.IsZero() || d.Before(earliest) {
			earliest = d
		}
	}
	return earliest
}
