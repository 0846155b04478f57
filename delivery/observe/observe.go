// Package observe is the pipeline's last stage: the things told, in order, what each
// sync wrote (or, once at start-up, what a previous run left on disk): the metrics,
// expiry warnings, the app's reload, and the Events and log. Which of them a pod has
// is the list its pipeline is given.
package observe

import (
	"time"

	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/delivery/metrics"
	"github.com/trustsync/trustsync/delivery/podevents"
	"github.com/trustsync/trustsync/delivery/render"
)

// Observer is told of each sync.
type Observer interface {
	Wrote(w Written)
}

// Written is what one sync did and what the app holds after it.
type Written struct {
	// Now is the rendering on disk: the new one when it was written, the last one
	// when the write failed, or the files a previous run left (FromDisk).
	Now *render.Rendering
	// FromDisk: nothing was synced; Now is what a previous run left, found at
	// start-up, which is what the app has.
	FromDisk bool
	// Changed says the write changed the directory.
	Changed bool
	// WriteErr is set when nothing could be written at all.
	WriteErr error
	// Failed maps each held-back path to why: every path when the write failed.
	Failed map[string]error
	Took   time.Duration
}

// Reached reports whether the sync reached the directory.
func (w Written) Reached() bool { return !w.FromDisk && w.WriteErr == nil }

// Err summarises every failure in one line, paths in order.
func (w Written) Err() error { return render.Summary(w.Failed) }

// Fresh is every path written now; none when nothing was written.
func (w Written) Fresh() map[string]render.Path {
	if !w.Reached() || w.Now == nil {
		return nil
	}
	return w.Now.Fresh()
}

// anchorCounts is, per path written now, its number of anchors.
func (w Written) anchorCounts() map[string]int {
	out := map[string]int{}
	for p, path := range w.Fresh() {
		out[p] = len(path.Anchors)
	}
	return out
}

// Metrics records each sync in m.
func Metrics(m *metrics.Metrics) Observer { return metricsObserver{m: m} }

type metricsObserver struct{ m *metrics.Metrics }

func (o metricsObserver) Wrote(w Written) {
	if w.FromDisk {
		return
	}
	if w.Reached() {
		expiries := map[string]time.Time{}
		for p, path := range w.Fresh() {
			expiries[p] = path.FirstExpiry
		}
		o.m.AnchorExpiry(expiries)
	}
	o.m.Sync(len(w.Failed) == 0, w.anchorCounts(), w.Took)
}

const (
	reasonSyncFailed = "TrustBundleSyncFailed"
	reasonRecovered  = "TrustBundleSyncRecovered"
)

// Reporter logs every sync that changed something or failed, and records an Event on
// the pod when the failure changes (a new or different error) and when the pipeline
// recovers, so `kubectl describe pod` shows why a trust file is stale without an Event
// per retry. It goes last in a pipeline's list, so that its "Wrote trust files"
// follows every other observer's decision about the same write in the log.
type Reporter struct {
	events  podevents.Recorder
	failing podevents.Throttle
}

// NewReporter reports on events.
func NewReporter(events podevents.Recorder, failing podevents.Throttle) *Reporter {
	return &Reporter{events: events, failing: failing}
}

// Wrote logs and records what a sync did; what a previous run left is not news.
func (r *Reporter) Wrote(w Written) {
	if w.FromDisk {
		return
	}
	err := w.Err()
	switch {
	case err != nil:
		klog.ErrorS(err, "Trust files held at their last good content", "heldPaths", len(w.Failed))
		if msg := err.Error(); r.failing.Due(msg) {
			r.events.Warning(reasonSyncFailed, "Keeping the last good trust files: "+msg)
		}
	case r.failing.Recovered():
		klog.InfoS("Trust files are current again", "anchors", w.anchorCounts())
		r.events.Normal(reasonRecovered, "Trust files are current again")
	}
	if w.Changed {
		klog.InfoS("Wrote trust files", "anchors", w.anchorCounts())
	}
}
