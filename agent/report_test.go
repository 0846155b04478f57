package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trustsync/trustsync/agent/holdings"
	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/trustfiles"
)

// node makes pods pods of files trust files each; set(p, f) is the anchors pod p's
// file f holds.
func node(pods, files int, set func(p, f int) []string) []holdings.Pod {
	var held []holdings.Pod
	for p := range pods {
		hp := holdings.Pod{Namespace: "apps", Name: fmt.Sprintf("pod-%03d", p), UID: types.UID(fmt.Sprintf("uid-%03d", p))}
		for f := range files {
			hp.Files = append(hp.Files, holdings.File{
				TrustFile: trustfiles.TrustFile{Delivery: v1alpha1.DeliveryNode, Volume: "trustsync-anchors", File: fmt.Sprintf("ca-%d.pem", f),
					MountPaths: []string{fmt.Sprintf("/var/run/trust-anchors/ca-%d.pem", f)}},
				Anchors: set(p, f), ChangedAt: time.Unix(1700000000, 0),
			})
		}
		held = append(held, hp)
	}
	return held
}

func anchors(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = bundle.AnchorID(fmt.Appendf(nil, "%s-%d", prefix, i))
	}
	return out
}

func TestBuild_StoresEachAnchorSetOnceAndStaysWithinItsBound(t *testing.T) {
	shared := anchors("public roots", 150)
	for _, tc := range []struct {
		name       string
		held       []holdings.Pod
		wantSets   int
		wantElided bool
	}{
		{name: "110 pods (the kubelet's most) holding the same 150 roots in 4 files: one set",
			held: node(110, 4, func(int, int) []string { return shared }), wantSets: 1},
		{name: "110 pods each holding its own 150 anchors in 4 files: within the bound, the largest sets' anchors left out",
			held: node(110, 4, func(p, f int) []string { return anchors(fmt.Sprint(p, f), 150) }), wantSets: 440, wantElided: true},
		{name: "an empty node", held: nil, wantSets: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := BuildReport("node-1", tc.held, time.Now())
			data, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if len(data) > v1alpha1.MaxReportBytes {
				t.Errorf("the report is %d bytes, over its bound of %d", len(data), v1alpha1.MaxReportBytes)
			}
			if len(r.AnchorSets) != tc.wantSets {
				t.Errorf("%d anchor sets, want %d", len(r.AnchorSets), tc.wantSets)
			}
			elided := false
			for _, s := range r.AnchorSets {
				elided = elided || s.Elided
				if !s.Elided && len(s.Anchors) != s.Count {
					t.Errorf("set %s lists %d anchors, counts %d", s.ID, len(s.Anchors), s.Count)
				}
			}
			if elided != tc.wantElided {
				t.Errorf("elided: %v, want %v", elided, tc.wantElided)
			}
			if len(r.Pods) != len(tc.held) {
				t.Fatalf("%d pods reported, want %d: pods are never left out", len(r.Pods), len(tc.held))
			}
			for _, p := range r.Pods {
				for _, f := range p.Files {
					if _, ok := r.Set(f.AnchorSet); !ok {
						t.Errorf("%s/%s %s refers to set %q, which the report lacks", p.Namespace, p.Name, f.Path, f.AnchorSet)
					}
				}
			}
			t.Logf("%d pods: %d bytes", len(r.Pods), len(data))
		})
	}
}

func TestSameHoldings_IgnoresWhenTheReportWasWritten(t *testing.T) {
	held := node(3, 1, func(int, int) []string { return anchors("x", 2) })
	a, b := BuildReport("n", held, time.Now()), BuildReport("n", held, time.Now().Add(time.Hour))
	if !v1alpha1.SameHoldings(a, b) {
		t.Error("two reports of the same holdings an hour apart differ")
	}
	held[1].Files[0].Anchors = anchors("y", 2)
	if v1alpha1.SameHoldings(a, BuildReport("n", held, time.Now())) {
		t.Error("a pod holding other anchors is the same report")
	}
}

// TestReportPublisher_WritesOnChangeAtMostEveryMinIntervalAndSaysWhenIdle drives the
// publisher scan by scan: each step is how long after the last scan it comes, what
// that scan finds, and whether it must be written and leave the publisher idle.
func TestReportPublisher_WritesOnChangeAtMostEveryMinIntervalAndSaysWhenIdle(t *testing.T) {
	holdsA := node(2, 1, func(int, int) []string { return anchors("a", 1) })
	holdsB := node(2, 1, func(int, int) []string { return anchors("b", 1) })
	steps := []struct {
		name      string
		after     time.Duration
		held      []holdings.Pod
		changed   bool
		wantWrite bool
		wantIdle  bool
	}{
		{name: "the first scan is written", held: holdsA, changed: true, wantWrite: true, wantIdle: true},
		{name: "a change within MinInterval waits", after: 500 * time.Millisecond, held: holdsB, changed: true},
		{name: "and keeps waiting while nothing else changes", after: 500 * time.Millisecond, held: holdsB},
		{name: "once MinInterval passed it is written", after: time.Second, held: holdsB, wantWrite: true, wantIdle: true},
		{name: "a change back to what is written waits", after: 500 * time.Millisecond, held: holdsB, changed: true},
		{name: "and is not written when it equals the report", after: 2 * time.Second, held: holdsB, wantIdle: true},
		{name: "nothing changed: nothing written", after: 10 * time.Second, held: holdsB, wantIdle: true},
		{name: "the heartbeat rewrites the same holdings", after: time.Hour, held: holdsB, wantWrite: true, wantIdle: true},
	}

	clk := &steppedClock{FakeClock: clocktesting.NewFakeClock(time.Unix(1700000000, 0)), tick: make(chan time.Time)}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{v1alpha1.NodeTrustReportResource: "NodeTrustReportList"})
	type scan struct {
		held    []holdings.Pod
		changed bool
	}
	scans := make(chan scan)
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var writes, idles int
	p := &ReportPublisher{
		Client: dyn.Resource(v1alpha1.NodeTrustReportResource), Node: "n1", Clock: clk,
		ScanEvery: 500 * time.Millisecond, MinInterval: 2 * time.Second, Heartbeat: time.Hour,
		Scan: func() ([]holdings.Pod, bool) {
			select {
			case s := <-scans:
				return s.held, s.changed
			case <-ctx.Done(): // the test is over
				return nil, false
			}
		},
		Wrote: func(err error) {
			if err != nil {
				t.Errorf("write failed: %v", err)
			}
			mu.Lock()
			writes++
			mu.Unlock()
		},
		Idle: func() { mu.Lock(); idles++; mu.Unlock() },
	}
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	counts := func() (int, int) { mu.Lock(); defer mu.Unlock(); return writes, idles }
	w0, i0 := counts()
	for k, s := range steps {
		if k > 0 {
			// The tick is taken only once the loop is done with the scan before.
			clk.tick <- clk.Now()
			w, i := counts()
			if prev := steps[k-1]; (w > w0) != prev.wantWrite || (i > i0) != prev.wantIdle {
				t.Errorf("%s: wrote %v, idle %v; want %v, %v", prev.name, w > w0, i > i0, prev.wantWrite, prev.wantIdle)
			}
			w0, i0 = w, i
		}
		clk.Step(s.after)
		scans <- scan{s.held, s.changed}
	}
	clk.tick <- clk.Now()
	if w, i := counts(); (w > w0) != steps[len(steps)-1].wantWrite || (i > i0) != steps[len(steps)-1].wantIdle {
		t.Errorf("%s: wrote %v, idle %v", steps[len(steps)-1].name, w > w0, i > i0)
	}
	got, err := dyn.Resource(v1alpha1.NodeTrustReportResource).Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the report was not written: %v", err)
	}
	r, err := v1alpha1.NodeTrustReportFromUnstructured(got)
	if err != nil || !v1alpha1.SameHoldings(r, BuildReport("n1", holdsB, clk.Now())) {
		t.Errorf("the report in the API does not say what the pods hold last (%v)", err)
	}
}

// steppedClock ticks when the test says: a tick is sent on an unbuffered channel, so
// sending it is also the sign that the loop finished what it was doing.
type steppedClock struct {
	*clocktesting.FakeClock
	tick chan time.Time
}

func (c *steppedClock) NewTicker(time.Duration) clock.Ticker { return steppedTicker(c.tick) }

type steppedTicker chan time.Time

func (t steppedTicker) C() <-chan time.Time { return t }
func (steppedTicker) Stop()                 {}
