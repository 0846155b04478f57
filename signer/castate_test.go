package signer

import (
	"context"
	"crypto/x509"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/trustsync/trustsync/test/fixtures"
)

var testRotation = rotation{RotateAt: 0.5, Window: 10 * time.Minute, Validity: 100 * time.Hour, MaxLeafLifetime: 24 * time.Hour}

// genAt makes CAs like the signer would, valid from their creation for 100 hours.
func genAt(t time.Time) (*CA, error) {
	return generateCA(context.Background(), "example.com/test", t, testRotation.Validity, caKeys{}, true)
}

// roundTrip saves and reloads the state through a Secret, as a restart would: every
// test below does it between steps, so each step is proven to resume from storage.
func roundTrip(t *testing.T, st *caState) *caState {
	t.Helper()
	// The operator's request is an annotation trustsync never writes; it stays on the
	// Secret across saves.
	s := &corev1.Secret{}
	if st.RotateRequested != "" {
		s.Annotations = map[string]string{AnnotationRotateRequested: st.RotateRequested}
	}
	if err := applyToSecret(st, s); err != nil {
		t.Fatal(err)
	}
	back, err := stateFromSecret(context.Background(), s, caKeys{})
	if err != nil {
		t.Fatal(err)
	}
	return back
}

func anchorSerials(st *caState) map[string]bool {
	out := map[string]bool{}
	for _, a := range st.anchors() {
		out[a.SerialNumber.String()] = true
	}
	return out
}

// The whole life of a rotation, a restart between every step: stable until the
// rotation point; then the next CA exists but is unpublished; published, it waits out
// the window without signing; then it signs while the old anchor stays until nothing
// the old CA signed can be valid; then the old anchor goes.
func TestRotation_TrustBeforeUse(t *testing.T) {
	first, _ := genAt(t0)
	st := &caState{Current: first, Managed: true}

	changed, next, err := st.advance(t0.Add(49*time.Hour), testRotation, false, genAt)
	if err != nil || changed || st.phase() != PhaseStable {
		t.Fatalf("before the rotation point: changed=%v phase=%s err=%v", changed, st.phase(), err)
	}
	if want := first.Cert.NotBefore.Add(first.Cert.NotAfter.Sub(first.Cert.NotBefore) / 2); !next.Equal(want) {
		t.Errorf("next deadline = %s, want the rotation point %s", next, want)
	}

	rotateTime := t0.Add(51 * time.Hour)
	if changed, _, _ = st.advance(rotateTime, testRotation, false, genAt); !changed || st.phase() != PhasePublishing {
		t.Fatalf("at the rotation point: changed=%v phase=%s", changed, st.phase())
	}
	st = roundTrip(t, st)
	if st.Current.Cert.SerialNumber.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatal("the new CA signs before its anchor is published")
	}
	second := st.Next
	if !anchorSerials(st)[first.Cert.SerialNumber.String()] || !anchorSerials(st)[second.Cert.SerialNumber.String()] {
		t.Fatal("anchors to publish must hold old and new")
	}

	// Publishing starts the window. Until it ends, nothing changes.
	publishTime := rotateTime.Add(time.Minute)
	if !st.markPublished(publishTime) || st.phase() != PhaseWaiting {
		t.Fatalf("after publishing: phase=%s", st.phase())
	}
	st = roundTrip(t, st)
	if changed, next, _ = st.advance(publishTime.Add(9*time.Minute), testRotation, false, genAt); changed || !next.Equal(publishTime.Add(10*time.Minute)) {
		t.Fatalf("inside the window: changed=%v next=%s", changed, next)
	}

	switchTime := publishTime.Add(10 * time.Minute)
	if changed, next, _ = st.advance(switchTime, testRotation, false, genAt); !changed || st.phase() != PhaseStable {
		t.Fatalf("after the window: changed=%v phase=%s", changed, st.phase())
	}
	st = roundTrip(t, st)
	if st.Current.Cert.SerialNumber.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatal("the new CA does not sign after the window")
	}
	if len(st.Retired) != 1 || !st.Retired[0].Cert.Equal(first.Cert) {
		t.Fatalf("retired = %v, want the old CA's anchor", st.Retired)
	}
	if want := switchTime.Add(testRotation.MaxLeafLifetime + backdate); !st.Retired[0].Until.Equal(want) {
		t.Errorf("retired until %s, want %s: the longest certificate the old CA can have signed", st.Retired[0].Until, want)
	}
	if !anchorSerials(st)[first.Cert.SerialNumber.String()] {
		t.Error("the retired anchor is not published")
	}
	if !next.Equal(st.Retired[0].Until) {
		t.Errorf("next deadline = %s, want the retired anchor's end %s", next, st.Retired[0].Until)
	}

	if changed, _, _ = st.advance(st.Retired[0].Until, testRotation, false, genAt); !changed || len(st.Retired) != 0 {
		t.Fatalf("after the retired anchor's end: changed=%v retired=%d", changed, len(st.Retired))
	}
	if anchorSerials(st)[first.Cert.SerialNumber.String()] {
		t.Error("the old anchor is still published")
	}
}

// A crash after the next CA was saved but before its anchor was published must not
// start the window: it starts only when publishing succeeds.
func TestRotation_CrashBeforePublishingDoesNotStartTheWindow(t *testing.T) {
	first, _ := genAt(t0)
	st := &caState{Current: first, Managed: true, RotateRequested: "2026-11-21T12:00:00Z"}
	if changed, _, _ := st.advance(t0, testRotation, false, genAt); !changed || st.phase() != PhasePublishing {
		t.Fatalf("a rotation request did not start a rotation: %s", st.phase())
	}
	st = roundTrip(t, st) // crash here: saved, never published
	for _, later := range []time.Duration{time.Hour, 24 * time.Hour} {
		if changed, _, _ := st.advance(t0.Add(later), testRotation, false, genAt); changed || st.phase() != PhasePublishing {
			t.Fatalf("%s later, unpublished: changed=%v phase=%s", later, changed, st.phase())
		}
	}
	if st.RotateHandled != st.RotateRequested {
		t.Error("the handled request was not recorded, so it would start another rotation")
	}
}

func TestRotation_AHandledRequestStartsNoSecondRotation(t *testing.T) {
	first, _ := genAt(t0)
	st := &caState{Current: first, Managed: true, RotateRequested: "r1", RotateHandled: "r1"}
	if changed, _, _ := st.advance(t0.Add(time.Hour), testRotation, false, genAt); changed {
		t.Fatal("an already handled request rotated again")
	}
	st.RotateRequested = "r2"
	if changed, _, _ := st.advance(t0.Add(time.Hour), testRotation, false, genAt); !changed || st.Next == nil {
		t.Fatal("a new request did not rotate")
	}
}

// A brought-in CA (cert-manager's, say) is its owner's to rotate: trustsync never
// replaces it, and notes a rotation request as seen.
func TestRotation_BroughtInCAIsNeverRotated(t *testing.T) {
	ca, _ := genAt(t0)
	st := &caState{Current: ca, Managed: false, RotateRequested: "r1"}
	changed, next, _ := st.advance(t0.Add(99*time.Hour), testRotation, false, genAt)
	if st.Next != nil || !next.IsZero() {
		t.Fatalf("a brought-in CA got a successor (next=%v, deadline=%s)", st.Next, next)
	}
	if !changed || st.RotateHandled != "r1" {
		t.Error("the request was not noted as seen")
	}
}

func TestRotation_RetiredAnchorsGoNoLaterThanTheirOwnExpiry(t *testing.T) {
	short := fixtures.MustNew(fixtures.Options{NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour)})
	current, _ := genAt(t0)
	st := &caState{Current: current, Managed: true, Retired: []retiredAnchor{{Cert: short.Cert, Until: t0.Add(48 * time.Hour)}}}
	if changed, _, _ := st.advance(t0.Add(time.Hour), testRotation, false, genAt); !changed || len(st.Retired) != 0 {
		t.Error("an expired retired anchor was kept")
	}
}

func TestCASecret_BroughtInTLSSecretWithCA(t *testing.T) {
	root := fixtures.CA("corporate root")
	inter := fixtures.MustNew(fixtures.Options{CommonName: "cert-manager intermediate", Parent: root})
	s := &corev1.Secret{Type: corev1.SecretTypeTLS, Data: map[string][]byte{
		"tls.crt": inter.CertPEM(), "tls.key": inter.KeyPEM(), "ca.crt": root.CertPEM(),
	}}
	st, err := stateFromSecret(context.Background(), s, caKeys{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Managed {
		t.Error("a brought-in Secret was taken as managed")
	}
	if got := st.anchors(); len(got) != 1 || !got[0].Equal(root.Cert) {
		t.Errorf("anchors = %v, want the root from ca.crt", subjects(got))
	}
}

func TestCASecret_RefusesWhatCannotSign(t *testing.T) {
	leaf := fixtures.MustNew(fixtures.Options{Leaf: true, Parent: fixtures.CA("p")})
	other := fixtures.CA("other")
	tests := []struct {
		name string
		data map[string][]byte
	}{
		{"a leaf is no CA", map[string][]byte{"tls.crt": leaf.CertPEM(), "tls.key": leaf.KeyPEM()}},
		{"a key that is not the certificate's", map[string][]byte{"tls.crt": fixtures.CA("x").CertPEM(), "tls.key": other.KeyPEM()}},
		{"no key", map[string][]byte{"tls.crt": other.CertPEM()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := stateFromSecret(context.Background(), &corev1.Secret{Data: tc.data}, caKeys{}); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func subjects(certs []*x509.Certificate) []string {
	var out []string
	for _, c := range certs {
		out = append(out, c.Subject.CommonName)
	}
	return out
}

// Observed propagation: the next CA signs as soon as every pod is seen holding it, or
// once the maximum wait has passed without; timed propagation waits its window
// whatever is observed.
func TestRotation_ObservedPropagationSignsOnceEveryPodHoldsTheNewCA(t *testing.T) {
	observed := testRotation
	observed.Propagation, observed.MaxWait = PropagationObserved, time.Hour
	for _, tc := range []struct {
		name       string
		r          rotation
		after      time.Duration
		propagated bool
		switches   bool
		next       time.Duration // the deadline returned when it does not switch
	}{
		{name: "observed: every pod holds it a second after publishing", r: observed, after: time.Second, propagated: true, switches: true},
		{name: "observed: a pod lacks it after the timed window", r: observed, after: 30 * time.Minute, propagated: false, next: time.Hour},
		{name: "observed: a pod still lacks it at the maximum wait", r: observed, after: time.Hour, propagated: false, switches: true},
		{name: "timed: every pod holds it, the window is still waited out", r: testRotation, after: time.Second, propagated: true, next: 10 * time.Minute},
		{name: "timed: the window passed", r: testRotation, after: 10 * time.Minute, propagated: false, switches: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, _ := genAt(t0)
			st := &caState{Current: first, Managed: true, RotateRequested: "now"}
			if _, _, err := st.advance(t0, tc.r, false, genAt); err != nil || st.Next == nil {
				t.Fatalf("the rotation did not start: %v", err)
			}
			st.markPublished(t0)
			changed, next, err := st.advance(t0.Add(tc.after), tc.r, tc.propagated, genAt)
			if err != nil {
				t.Fatal(err)
			}
			switched := changed && st.Next == nil
			if switched != tc.switches {
				t.Fatalf("switched to the new CA: %v, want %v (phase %s)", switched, tc.switches, st.phase())
			}
			if !tc.switches && !next.Equal(t0.Add(tc.next)) {
				t.Errorf("next deadline %s, want %s", next.Sub(t0), tc.next)
			}
		})
	}
}

// The bundle endpoint's sequence moves exactly when the published anchors change (a
// next CA created, a retired one dropped), never when they do not (publishing, the
// switch to the new CA), and survives every save and reload: a peer never sees it go
// back, whichever replica serves it.
func TestSequence_MovesExactlyWhenTheAnchorsChange(t *testing.T) {
	first, _ := genAt(t0)
	st := &caState{Current: first, Managed: true, AnchorsChangedAt: t0}
	seq := st.sequence()
	step := func(name string, at time.Time, wantMove bool) {
		t.Helper()
		before := anchorSerials(st)
		if _, _, err := st.advance(at, testRotation, false, genAt); err != nil {
			t.Fatal(err)
		}
		st.markPublished(at)
		st = roundTrip(t, st)
		changed := len(before) != len(anchorSerials(st))
		for s := range before {
			changed = changed || !anchorSerials(st)[s]
		}
		got := st.sequence()
		switch {
		case changed != wantMove:
			t.Fatalf("%s: anchors changed %v, the test expected %v", name, changed, wantMove)
		case wantMove && got <= seq:
			t.Errorf("%s: the anchors changed but the sequence went %d -> %d", name, seq, got)
		case !wantMove && got != seq:
			t.Errorf("%s: the anchors did not change but the sequence went %d -> %d", name, seq, got)
		}
		seq = got
	}
	rotate := t0.Add(51 * time.Hour)
	step("before the rotation point", t0.Add(49*time.Hour), false)
	step("next CA created and published", rotate, true)
	step("inside the window", rotate.Add(5*time.Minute), false)
	step("the new CA signs", rotate.Add(11*time.Minute), false)
	step("the retired anchor dropped", rotate.Add(11*time.Minute+testRotation.MaxLeafLifetime+backdate), true)

	// Two changes within one second still move it.
	st.anchorsChanged(time.Unix(int64(seq), 0))
	if st.sequence() <= seq {
		t.Errorf("a second change in the same second left the sequence at %d", st.sequence())
	}
}

// With the bundle endpoint on, a new CA every pod was seen holding still waits the
// peers' minimum: peers are not observed, only given time to fetch it.
func TestRotation_ObservedWaitsThePeersMinimum(t *testing.T) {
	r := testRotation
	r.Propagation, r.MaxWait, r.MinWait = PropagationObserved, time.Hour, 3*time.Minute
	published := t0
	for _, tc := range []struct {
		name     string
		at       time.Time
		observed bool
		want     bool
	}{
		{"observed before the minimum: waits", published.Add(time.Minute), true, false},
		{"observed at the minimum: signs", published.Add(3 * time.Minute), true, true},
		{"not observed after the minimum: waits", published.Add(10 * time.Minute), false, false},
		{"not observed at the maximum: signs", published.Add(time.Hour), false, true},
	} {
		if got := r.propagated(published, tc.at, tc.observed); got != tc.want {
			t.Errorf("%s: propagated = %v", tc.name, got)
		}
	}
}
