package agent

import (
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/agent/holdings"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/delivery/observe"
	"github.com/trustsync/trustsync/delivery/podevents"
)

// AnchorExpiry watches the expiry of what the node's pods trust, whichever delivery
// wrote their files: sidecars warn only of what they write, and the kubelet's
// projected volumes warn of nothing. It exports each anchor's expiry once (a gauge
// per anchor, not per pod), and records on each pod that trusts an anchor expiring
// within the window the same TrustAnchorExpiring Event a sidecar records, under the
// same name, so a pod that a sidecar or the agent's own volume already warned gets no
// second one.
type AnchorExpiry struct {
	// Days is the warning window; 0 records no Events (the gauge is kept).
	Days int
	// Events gives the recorder of a pod's Events.
	Events func(podevents.PodRef) podevents.OnceRecorder
	Clock  clock.PassiveClock
	Gauge  *prometheus.GaugeVec
	warner map[types.UID]*observe.ExpiryWarner
	named  map[string]string // the gauge's series: anchor id to name
}

// Observe looks at what a scan found; anchor resolves an identity to its anchor.
func (e *AnchorExpiry) Observe(held []holdings.Pod, anchor func(string) (*bundle.Anchor, bool)) {
	if e.warner == nil {
		e.warner, e.named = map[types.UID]*observe.ExpiryWarner{}, map[string]string{}
	}
	named := map[string]*bundle.Anchor{}
	pods := map[types.UID]bool{}
	for _, p := range held {
		files := map[string][]*bundle.Anchor{}
		for _, f := range p.Files {
			for _, id := range f.Anchors {
				a, ok := anchor(id)
				if !ok || a.NotAfter.IsZero() {
					continue
				}
				named[id] = a
				files[fileName(f)] = append(files[fileName(f)], a)
			}
		}
		pods[p.UID] = true
		if e.Days <= 0 || e.Events == nil || len(files) == 0 {
			continue
		}
		w, ok := e.warner[p.UID]
		if !ok {
			w = observe.NewExpiryWarner(e.Days, e.Events(podevents.PodRef{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}), e.Clock)
			e.warner[p.UID] = w
		}
		w.Check(files)
	}
	series := soonest(named, MaxExpirySeries)
	for id, name := range e.named {
		if n, ok := series[id]; !ok || n != name {
			e.Gauge.DeleteLabelValues(id, name)
		}
	}
	for id, name := range series {
		e.Gauge.WithLabelValues(id, name).Set(float64(named[id].NotAfter.Unix()))
	}
	e.named = series
	for uid := range e.warner {
		if !pods[uid] {
			delete(e.warner, uid)
		}
	}
}

// fileName is how the pod's author knows the file: where it is mounted.
func fileName(f holdings.File) string {
	if len(f.MountPaths) > 0 {
		return slices.Min(f.MountPaths)
	}
	return f.File
}

// MaxExpirySeries bounds the expiry gauge's series on one node: a pod may hold
// thousands of anchors of its own, and each would be a series.
const MaxExpirySeries = 1000

// soonest names the n anchors of named that expire first (then by identity), by id.
func soonest(named map[string]*bundle.Anchor, n int) map[string]string {
	ids := slices.Collect(maps.Keys(named))
	slices.SortFunc(ids, func(a, b string) int {
		if c := named[a].NotAfter.Compare(named[b].NotAfter); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	out := map[string]string{}
	for _, id := range ids[:min(n, len(ids))] {
		out[id] = named[id].Name
	}
	return out
}
