package sidecar

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/sidecar/contract"
	"github.com/trustsync/trustsync/test/fixtures"
)

// kicked reports whether the syncs since the last call asked for a reload.
func kicked(r *reloader) bool {
	select {
	case <-r.kick:
		return true
	default:
		return false
	}
}

// A change, for a reload, is a change of the set of anchors of a file or of the
// workload certificate: never new bytes alone, and never the first write.
func TestSync_ReloadsOnAChangeOfSetNotOfBytes(t *testing.T) {
	w := newWorld()
	a, b, c := fixtures.CA("a"), fixtures.CA("b"), fixtures.CA("c")
	_ = w.native.Add(ctb("one", "", nil, a, b))
	_ = w.secrets.Add(passwordSecret("first"))
	dir := t.TempDir()
	sourcesJSON := `[{"name": "one", "path": "ca.pem"}, {"name": "one", "path": "t.p12", "format": "pkcs12", "passwordSecret": {"name": "store-pass", "key": "password"}},
		{"name": "extra", "path": "extra.pem", "optional": true}]`
	newSyncerWithReloader := func() (*syncer, *reloader) {
		s, _ := newTestSyncer(t, w, NewAtomicWriter(dir), sourcesJSON)
		r := newReloader(nil, &fakeEvents{}, clocktesting.NewFakeClock(time.Now()))
		s.observers = append(s.observers, r)
		return s, r
	}
	s, r := newSyncerWithReloader()
	steps := []struct {
		name   string
		change func()
		reload bool
	}{
		{"the first write at start-up", func() {}, false},
		{"a resync with nothing new", func() {}, false},
		{"the same anchors in another order, with a duplicate", func() { _ = w.native.Update(ctb("one", "", nil, b, a, b)) }, false},
		{"a new password: the store is re-encoded, its set is the same", func() { _ = w.secrets.Update(passwordSecret("second")) }, false},
		{"a new anchor", func() { _ = w.native.Update(ctb("one", "", nil, a, b, c)) }, true},
		{"an anchor removed", func() { _ = w.native.Update(ctb("one", "", nil, a, c)) }, true},
		{"a broken source holds its files back: nothing the app sees changes", func() {
			broken := ctb("one", "", nil, a)
			broken.Spec.TrustBundle += "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
			_ = w.native.Update(broken)
		}, false},
		{"the source mended with the set it had", func() { _ = w.native.Update(ctb("one", "", nil, c, a)) }, false},
		{"an optional file appears", func() { _ = w.native.Add(ctb("extra", "", nil, b)) }, true},
	}
	for _, st := range steps {
		st.change()
		s.sync()
		if got := kicked(r); got != st.reload {
			t.Fatalf("%s: reload = %v, want %v", st.name, got, st.reload)
		}
	}

	t.Run("a restarted sidecar takes what is on disk as the app's state", func(t *testing.T) {
		s, r := newSyncerWithReloader()
		if s.sync(); kicked(r) {
			t.Fatal("a restart with nothing new asked for a reload")
		}
		s, r = newSyncerWithReloader()
		_ = w.native.Update(ctb("one", "", nil, a, b)) // changed while the sidecar was down
		if s.sync(); !kicked(r) {
			t.Fatal("a change made while the sidecar was down was not reloaded")
		}
	})
}

func TestSync_TheCertificateIsPartOfTheState(t *testing.T) {
	w := newWorld()
	_ = w.native.Add(ctb("one", "", nil, fixtures.CA("a")))
	s, _ := newTestSyncer(t, w, NewAtomicWriter(t.TempDir()), `[{"name": "one", "path": "ca.pem"}]`)
	r := newReloader(nil, &fakeEvents{}, clocktesting.NewFakeClock(time.Now()))
	s.observers = append(s.observers, r)
	s.certificate = true
	var cert map[string]File
	s.extra = func() map[string]File { return cert }
	for _, st := range []struct {
		name string
		crt  string
		want bool
	}{
		{"the trust file, before the certificate: the app waits", "", false},
		{"the first certificate: the app starts with it", "cert-1", false},
		{"a renewed certificate", "cert-2", true},
		{"the same certificate at a resync", "cert-2", false},
	} {
		if st.crt != "" {
			cert = map[string]File{contract.FileCertificate: {Data: []byte(st.crt)}, contract.FileKey: {Data: []byte("key of " + st.crt)}}
		}
		s.sync()
		if got := kicked(r); got != st.want {
			t.Fatalf("%s: reload = %v, want %v", st.name, got, st.want)
		}
	}
}

func TestExpiryWarner_OncePerAnchorPerDay(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	events := &fakeEvents{}
	w := newExpiryWarner(30, events, clk)
	soon := tsbundle.NewAnchor(fixtures.MustNew(fixtures.Options{CommonName: "old root", NotAfter: now.Add(5 * 24 * time.Hour)}).Cert.Raw)
	later := tsbundle.NewAnchor(fixtures.MustNew(fixtures.Options{CommonName: "new root", NotAfter: now.Add(365 * 24 * time.Hour)}).Cert.Raw)
	expired := tsbundle.NewAnchor(fixtures.MustNew(fixtures.Options{CommonName: "gone root", NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)}).Cert.Raw)
	files := map[string][]*tsbundle.Anchor{"ca.pem": {soon, later}, "other/ca.pem": {soon}}

	w.check(files)
	if len(events.got) != 1 {
		t.Fatalf("events %q, want one for the one anchor expiring within 30 days", events.got)
	}
	want := `Warning TrustAnchorExpiring: Trust anchor "CN=old root" (SHA-256 ` // then the sum
	if got := events.got[0]; !strings.HasPrefix(got, want) || !strings.Contains(got, ") in ca.pem, other/ca.pem expires at 2026-11-28T12:00:00Z, in 5 days; publish its successor and remove it before then") {
		t.Errorf("event %q", got)
	}
	for range 100 { // a sync every few minutes for most of a day
		clk.Step(10 * time.Minute)
		w.check(files)
	}
	if len(events.got) != 1 {
		t.Fatalf("%d events within a day, want 1", len(events.got))
	}
	clk.Step(24*time.Hour - 100*10*time.Minute)
	w.check(files)
	if len(events.got) != 2 || !strings.Contains(events.got[1], "in 4 days") {
		t.Fatalf("a day later: events %q, want a second warning", events.got)
	}
	// Each Event is keyed by the anchor and the day, so that a restarted sidecar's
	// warning is refused while the pod still shows the first.
	sum := fmt.Sprintf("%x", soon.Sum[:8])
	if want := []string{"expiry-" + sum + "-20261123", "expiry-" + sum + "-20261124"}; strings.Join(events.keys, " ") != strings.Join(want, " ") {
		t.Errorf("event keys %q, want %q", events.keys, want)
	}
	w.check(map[string][]*tsbundle.Anchor{"ca.pem": {expired}})
	if got := events.got[len(events.got)-1]; !strings.Contains(got, `"CN=gone root"`) || !strings.Contains(got, "expired at") {
		t.Errorf("an expired anchor: %q", got)
	}
	if newExpiryWarner(0, events, clk) != nil {
		t.Error("a window of 0 days still warns")
	}
}
