package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trustsync/trustsync/agent/holdings"
	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/delivery/podevents"
	"github.com/trustsync/trustsync/delivery/podevents/podeventstest"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/trustfiles"
)

// The agent warns of what every pod trusts, whichever delivery wrote its files: one
// series per anchor however many pods hold it, one Event per pod and anchor a day.
func TestAnchorExpiry_ExportsEachAnchorOnceAndWarnsEachPodThatTrustsOneExpiringSoon(t *testing.T) {
	now := time.Now()
	soon := mustCA(t, "Corp Root", now.Add(10*24*time.Hour))
	later := mustCA(t, "Public Root", now.Add(400*24*time.Hour))
	anchors := map[string]*bundle.Anchor{}
	for _, c := range []*fixtures.Cert{soon, later} {
		anchors[bundle.AnchorID(c.Cert.Raw)] = bundle.NewAnchor(c.Cert.Raw)
	}
	pod := func(name string, delivery v1alpha1.Delivery, held ...*fixtures.Cert) holdings.Pod {
		f := holdings.File{TrustFile: trustfiles.TrustFile{Delivery: delivery, File: "ca.pem", MountPaths: []string{"/etc/trust/ca.pem"}}}
		for _, c := range held {
			f.Anchors = append(f.Anchors, bundle.AnchorID(c.Cert.Raw))
		}
		return holdings.Pod{Namespace: "apps", Name: name, UID: types.UID("uid-" + name), Files: []holdings.File{f}}
	}
	held := []holdings.Pod{
		pod("native-app", v1alpha1.DeliveryNative, soon, later),
		pod("sidecar-app", v1alpha1.DeliverySidecar, soon),
		pod("fresh-app", v1alpha1.DeliveryNode, later),
	}
	recorders := map[string]*podeventstest.Recorder{}
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trustsync_agent_anchor_expiry_timestamp_seconds", Help: "h"}, []string{"anchor", "name"})
	clk := clocktesting.NewFakePassiveClock(now)
	e := &AnchorExpiry{Days: 30, Clock: clk, Gauge: gauge, Events: func(ref podevents.PodRef) podevents.OnceRecorder {
		r := &podeventstest.Recorder{}
		recorders[ref.Name] = r
		return r
	}}
	lookup := func(id string) (*bundle.Anchor, bool) { a, ok := anchors[id]; return a, ok }

	e.Observe(held, lookup)
	e.Observe(held, lookup) // a minute later: nothing new to say
	if n := testutil.CollectAndCount(gauge); n != 2 {
		t.Errorf("%d series, want one per anchor (2), however many pods hold each", n)
	}
	if got := testutil.ToFloat64(gauge.WithLabelValues(bundle.AnchorID(soon.Cert.Raw), "Corp Root")); got != float64(soon.Cert.NotAfter.Unix()) {
		t.Errorf("Corp Root's series reads %v, want its NotAfter %d", got, soon.Cert.NotAfter.Unix())
	}
	for name, want := range map[string]int{"native-app": 1, "sidecar-app": 1, "fresh-app": 0} {
		var events []string
		if r := recorders[name]; r != nil {
			events = r.Events()
		}
		if len(events) != want {
			t.Errorf("pod %s got %d Events, want %d: %q", name, len(events), want, events)
			continue
		}
		if want == 1 && (!strings.HasPrefix(events[0], "Warning TrustAnchorExpiring: ") || !strings.Contains(events[0], "/etc/trust/ca.pem")) {
			t.Errorf("pod %s: %q, want a TrustAnchorExpiring warning naming the file as the pod mounts it", name, events[0])
		}
	}

	// The anchor leaves every pod: its series goes, and so does the pods' state.
	e.Observe([]holdings.Pod{pod("fresh-app", v1alpha1.DeliveryNode, later)}, lookup)
	if n := testutil.CollectAndCount(gauge); n != 1 {
		t.Errorf("%d series after Corp Root left every pod, want 1", n)
	}
	if len(e.warner) != 1 {
		t.Errorf("%d pods remembered, want only the one still observed", len(e.warner))
	}
}

func TestAnchorExpiry_ZeroDaysExportsButWarnsOfNothing(t *testing.T) {
	c := mustCA(t, "Corp Root", time.Now().Add(24*time.Hour))
	id := bundle.AnchorID(c.Cert.Raw)
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g", Help: "h"}, []string{"anchor", "name"})
	e := &AnchorExpiry{Days: 0, Clock: clocktesting.NewFakePassiveClock(time.Now()), Gauge: gauge, Events: func(podevents.PodRef) podevents.OnceRecorder {
		t.Error("a recorder was asked for with warnings off")
		return &podeventstest.Recorder{}
	}}
	held := []holdings.Pod{{Namespace: "a", Name: "p", UID: "u", Files: []holdings.File{{Anchors: []string{id}}}}}
	e.Observe(held, func(string) (*bundle.Anchor, bool) { return bundle.NewAnchor(c.Cert.Raw), true })
	if n := testutil.CollectAndCount(gauge); n != 1 {
		t.Errorf("%d series, want the anchor's", n)
	}
}

func mustCA(t *testing.T, name string, notAfter time.Time) *fixtures.Cert {
	t.Helper()
	c, err := fixtures.New(fixtures.Options{CommonName: name, NotAfter: notAfter})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
