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
	current, err := generateCA("example.com/s", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	next, err := generateCA("example.com/s", now, time.Hour)
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
