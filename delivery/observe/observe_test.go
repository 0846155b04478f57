package observe

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/delivery/podevents"
	"github.com/trustsync/trustsync/delivery/podevents/podeventstest"
	"github.com/trustsync/trustsync/test/fixtures"
)

// The reporter records an Event when a failure starts or changes, again only every
// ten minutes while it lasts, and once when the files are current again.
func TestReporter_AnEventPerNewFailureAndPerRecovery(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	events := &podeventstest.Recorder{}
	r := NewReporter(events, podevents.Throttle{Clock: clk})
	held := func(msg string) Written { return Written{Failed: map[string]error{"ca.pem": errors.New(msg)}} }
	steps := []struct {
		name  string
		w     Written
		wants string // the Event it adds, if any
	}{
		{"what a previous run left is not news", Written{FromDisk: true, Failed: map[string]error{"ca.pem": errors.New("x")}}, ""},
		{"a failure", held("gone"), "Warning TrustBundleSyncFailed: Keeping the last good trust files: ca.pem: gone"},
		{"the same failure at the next sync", held("gone"), ""},
		{"another failure", held("broken"), "Warning TrustBundleSyncFailed: Keeping the last good trust files: ca.pem: broken"},
		{"the same failure eleven minutes on", held("broken"), "Warning TrustBundleSyncFailed: Keeping the last good trust files: ca.pem: broken"},
		{"a write that failed altogether", Written{WriteErr: errors.New("no space left on device"), Failed: map[string]error{"ca.pem": errors.New("cannot write: no space left on device")}},
			"Warning TrustBundleSyncFailed: Keeping the last good trust files: ca.pem: cannot write: no space left on device"},
		{"recovered", Written{Changed: true}, "Normal TrustBundleSyncRecovered: Trust files are current again"},
		{"current, and still so", Written{}, ""},
	}
	for _, st := range steps {
		before := len(events.Events())
		if strings.Contains(st.name, "eleven minutes") {
			clk.Step(11 * time.Minute)
		}
		r.Wrote(st.w)
		got := events.Events()[before:]
		switch {
		case st.wants == "" && len(got) != 0:
			t.Errorf("%s: recorded %q, want nothing", st.name, got)
		case st.wants != "" && (len(got) != 1 || got[0] != st.wants):
			t.Errorf("%s: recorded %q, want %q", st.name, got, st.wants)
		}
	}
}

func TestExpiryWarner_OncePerAnchorPerDay(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	events := &podeventstest.Recorder{}
	w := NewExpiryWarner(30, events, clk)
	soon := tsbundle.NewAnchor(fixtures.MustNew(fixtures.Options{CommonName: "old root", NotAfter: now.Add(5 * 24 * time.Hour)}).Cert.Raw)
	later := tsbundle.NewAnchor(fixtures.MustNew(fixtures.Options{CommonName: "new root", NotAfter: now.Add(365 * 24 * time.Hour)}).Cert.Raw)
	expired := tsbundle.NewAnchor(fixtures.MustNew(fixtures.Options{CommonName: "gone root", NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)}).Cert.Raw)
	files := map[string][]*tsbundle.Anchor{"ca.pem": {soon, later}, "other/ca.pem": {soon}}

	w.Check(files)
	if len(events.Events()) != 1 {
		t.Fatalf("events %q, want one for the one anchor expiring within 30 days", events.Events())
	}
	want := `Warning TrustAnchorExpiring: Trust anchor "CN=old root" (SHA-256 ` // then the sum
	if got := events.Events()[0]; !strings.HasPrefix(got, want) || !strings.Contains(got, ") in ca.pem, other/ca.pem expires at 2026-11-28T12:00:00Z, in 5 days; publish its successor and remove it before then") {
		t.Errorf("event %q", got)
	}
	for range 100 { // a sync every few minutes for most of a day
		clk.Step(10 * time.Minute)
		w.Check(files)
	}
	if len(events.Events()) != 1 {
		t.Fatalf("%d events within a day, want 1", len(events.Events()))
	}
	clk.Step(24*time.Hour - 100*10*time.Minute)
	w.Check(files)
	if len(events.Events()) != 2 || !strings.Contains(events.Events()[1], "in 4 days") {
		t.Fatalf("a day later: events %q, want a second warning", events.Events())
	}
	// Each Event is keyed by the anchor and the day, so that a restarted sidecar's
	// warning is refused while the pod still shows the first.
	sum := fmt.Sprintf("%x", soon.Sum[:8])
	if want := []string{"expiry-" + sum + "-20261123", "expiry-" + sum + "-20261124"}; strings.Join(events.Keys(), " ") != strings.Join(want, " ") {
		t.Errorf("event keys %q, want %q", events.Keys(), want)
	}
	w.Check(map[string][]*tsbundle.Anchor{"ca.pem": {expired}})
	if got := events.Events()[len(events.Events())-1]; !strings.Contains(got, `"CN=gone root"`) || !strings.Contains(got, "expired at") {
		t.Errorf("an expired anchor: %q", got)
	}
	if NewExpiryWarner(0, events, clk) != nil {
		t.Error("a window of 0 days still warns")
	}
}

// A pod's files may hold thousands of anchors about to expire (any pod author writes
// its own): it is warned of the MaxExpiryWarnings soonest one by one, and of the rest
// in one Event, once a day, never one Event (and one API write) per anchor.
func TestExpiryWarner_ThousandsOfAnchorsExpiringMakeFewEvents(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	events := &podeventstest.Recorder{}
	w := NewExpiryWarner(30, events, clk)
	var anchors []*tsbundle.Anchor
	for i := range 30 {
		anchors = append(anchors, tsbundle.NewAnchor(fixtures.MustNew(fixtures.Options{CommonName: fmt.Sprintf("expiring %02d", i), NotAfter: now.Add(time.Duration(i+1) * time.Hour)}).Cert.Raw))
	}
	files := map[string][]*tsbundle.Anchor{"ca.pem": anchors}
	for range 5 {
		w.Check(files)
		clk.Step(time.Minute)
	}
	got := events.Events()
	if len(got) != MaxExpiryWarnings+1 {
		t.Fatalf("%d events, want %d one by one and one for the rest:\n%s", len(got), MaxExpiryWarnings+1, strings.Join(got, "\n"))
	}
	if !strings.Contains(got[0], `"CN=expiring 00"`) || !strings.Contains(got[MaxExpiryWarnings-1], `"CN=expiring 09"`) {
		t.Errorf("the one-by-one warnings are not the soonest: %q ... %q", got[0], got[MaxExpiryWarnings-1])
	}
	if !strings.Contains(got[MaxExpiryWarnings], "20 more trust anchors in ca.pem expire within 720h0m0s") {
		t.Errorf("the rest: %q", got[MaxExpiryWarnings])
	}
}
