package signer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trustsync/trustsync/trustreport/query"
)

type failingGate struct{ err error }

func (g failingGate) progress(context.Context, string) (query.Progress, bool, error) {
	return query.Progress{}, false, g.err
}

// When the reports cannot be read, a waiting rotation says so (an Event naming the
// error, a metric) and invents no count: it is not taken as propagated, and the
// switch at the maximum wait says it could not be told.
func TestObserve_AnUnreadableProgressIsSaidNotInvented(t *testing.T) {
	now := time.Now()
	current, err := generateCA(context.Background(), "example.com/s", now, time.Hour, caKeys{}, true)
	if err != nil {
		t.Fatal(err)
	}
	next, err := generateCA(context.Background(), "example.com/s", now, time.Hour, caKeys{}, true)
	if err != nil {
		t.Fatal(err)
	}
	events := record.NewFakeRecorder(10)
	m := &caManager{signer: "example.com/s", metrics: NewMetrics(prometheus.NewRegistry()), events: events,
		gate: failingGate{errors.New("list pods: the server is unavailable")}, rotation: rotation{Propagation: PropagationObserved, MaxWait: time.Hour}}
	st := &caState{Current: current, Next: next, NextPublishedAt: now}
	secret := &corev1.Secret{}

	_, p, unobserved := m.observe(context.Background(), secret, st)
	if p != nil || unobserved == nil {
		t.Fatalf("observe = %+v, %v; want no progress and the error", p, unobserved)
	}
	if got := testutil.ToFloat64(m.metrics.rotationUnobserved.WithLabelValues("example.com/s")); got != 1 {
		t.Errorf("trustsync_signer_ca_rotation_unobserved_total = %v; want 1", got)
	}
	if e := <-events.Events; !strings.HasPrefix(e, "Warning RotationUnobserved") || !strings.Contains(e, "cannot tell whether the new CA reached the pods: list pods: the server is unavailable") {
		t.Errorf("Event %q; want a Warning saying the progress could not be told, and why", e)
	}
	m.observe(context.Background(), secret, st)
	if len(events.Events) != 0 {
		t.Errorf("the same failure was recorded twice: %q", <-events.Events)
	}

	m.recordSwitch(secret, st, nil, unobserved)
	if e := <-events.Events; !strings.HasPrefix(e, "Warning RotationProceededUnobserved") || strings.Contains(e, "0 of 1") {
		t.Errorf("the switch was recorded as %q; want it to say the progress could not be told", e)
	}
}

type fixedGate struct{ p query.Progress }

func (g fixedGate) progress(context.Context, string) (query.Progress, bool, error) {
	return g.p, true, nil
}

// Observed propagation signs once every observed pod holds the new CA, but never before
// the floor when something cannot be observed or nothing is observed at all.
func TestObserve_TheFloorHoldsWhenAConsumerCannotBeSeenOrNoneIsSeen(t *testing.T) {
	publishedAt := time.Now().Add(-time.Hour)
	current, err := generateCA(context.Background(), "example.com/s", publishedAt, 24*time.Hour, caKeys{}, true)
	if err != nil {
		t.Fatal(err)
	}
	next, err := generateCA(context.Background(), "example.com/s", publishedAt, 24*time.Hour, caKeys{}, true)
	if err != nil {
		t.Fatal(err)
	}
	staleObjects := query.ObjectProgress{Kind: "ConfigMap", Name: "trust-ca", Writer: "TrustTarget roots", Expected: 3, Detail: "its content does not hold it yet"}
	envPod := query.Straggler{Namespace: "apps", Pod: "env", Reason: query.NotObservable, Detail: "container app reads ConfigMap trust-ca (ca.pem) through env"}
	for _, tc := range []struct {
		name     string
		progress query.Progress
		after    time.Duration
		signs    bool
		// event is what the Event says, if any; floor, that it names the floor.
		event string
		floor bool
	}{
		{name: "every observed pod holding it and nothing unobservable signs at once",
			progress: query.Progress{Holding: 2, Expected: 2}, after: time.Second, signs: true},
		{name: "no consumer observed at all waits the floor",
			progress: query.Progress{}, after: time.Minute, signs: false, event: "no pod is observed selecting example.com:s:live", floor: true},
		{name: "no consumer observed signs once the floor passed",
			progress: query.Progress{}, after: 2*time.Minute + time.Second, signs: true},
		{name: "a pod reading through env waits the floor, named",
			progress: query.Progress{Holding: 1, Expected: 1, NotObservable: []query.Straggler{envPod}}, after: time.Minute, signs: false,
			event: "1 pod read example.com:s:live where no one can observe it: apps/env (NotObservable: container app reads ConfigMap trust-ca (ca.pem) through env); waiting the floor of 2m0s", floor: true},
		{name: "a pod reading through env does not hold back a rotation past the floor",
			progress: query.Progress{Holding: 1, Expected: 1, NotObservable: []query.Straggler{envPod}}, after: 3 * time.Minute, signs: true},
		{name: "an observed pod behind still holds it back past the floor",
			progress: query.Progress{Holding: 0, Expected: 1, Stragglers: []query.Straggler{{Namespace: "apps", Pod: "slow", Reason: query.Behind}}}, after: 3 * time.Minute, signs: false,
			event: "0 of 1 pods selecting example.com:s:live hold it; not yet: apps/slow (Behind"},
		{name: "a TrustTarget's objects without it hold it back past the floor, every pod holding it or not",
			progress: query.Progress{Holding: 2, Expected: 2, Objects: []query.ObjectProgress{staleObjects}}, after: 3 * time.Minute, signs: false,
			event: "objects written from example.com:s:live that do not all hold it: ConfigMap trust-ca of TrustTarget roots in 0 of 3 namespaces (its content does not hold it yet)"},
		{name: "annotated objects the controller's index leaves out wait the floor, named",
			progress: query.Progress{Holding: 1, Expected: 1, Unobserved: []string{"3 annotated objects are not in the controller's index (it is full): their readers are not observed"}}, after: time.Minute, signs: false,
			event: "3 annotated objects are not in the controller's index (it is full): their readers are not observed; waiting the floor of 2m0s", floor: true},
		{name: "an annotated caBundle without it holds it back past the floor, named",
			progress: query.Progress{Holding: 1, Expected: 1, Objects: []query.ObjectProgress{{Kind: "ValidatingWebhookConfiguration", Name: "hooks", Writer: "annotation", Expected: 1, Detail: "its content does not hold it yet"}}}, after: 3 * time.Minute, signs: false,
			event: "objects written from example.com:s:live that do not all hold it: annotated ValidatingWebhookConfiguration hooks (its content does not hold it yet)"},
		{name: "a TrustTarget's objects holding it in every namespace let it sign",
			progress: query.Progress{Holding: 2, Expected: 2, Objects: []query.ObjectProgress{{Kind: "ConfigMap", Name: "trust-ca", Writer: "TrustTarget roots", Holding: 3, Expected: 3}}}, after: time.Second, signs: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := publishedAt.Add(tc.after)
			events := record.NewFakeRecorder(10)
			m := &caManager{signer: "example.com/s", metrics: NewMetrics(prometheus.NewRegistry()), events: events, gate: fixedGate{tc.progress},
				clock: clocktesting.NewFakePassiveClock(now), rotation: rotation{Propagation: PropagationObserved, MaxWait: time.Hour, Floor: DefaultMinWait, MaxLeafLifetime: time.Hour}}
			st := &caState{Current: current, Next: next, NextPublishedAt: publishedAt, Managed: true}
			rot, p, unobserved := m.observe(context.Background(), &corev1.Secret{}, st)
			if _, _, err := st.advance(now, rot, propagated(p, unobserved), nil); err != nil {
				t.Fatal(err)
			}
			if signs := st.Next == nil; signs != tc.signs {
				t.Errorf("%s after publishing the new CA signs: %v; want %v", tc.after, signs, tc.signs)
			}
			event := ""
			if len(events.Events) > 0 {
				event = <-events.Events
			}
			if !strings.Contains(event, tc.event) || (tc.event == "") != (event == "") || tc.floor != strings.Contains(event, "floor") {
				t.Errorf("Event %q; want one containing %q", event, tc.event)
			}
		})
	}
}
