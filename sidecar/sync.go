package sidecar

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	tsbundle "github.com/trustsync/trustsync/bundle"
)

// trustFileMode: trust anchors are public; any process of the pod may read them.
const trustFileMode = 0o644

// syncer turns the sources' current state into the trust files. A path whose sources
// fail keeps its last good content; the others are written; one atomic swap writes
// them all. Upstream's rule, and the point of the sidecar: a workload always finds a
// complete trust file, and an error never empties one.
type syncer struct {
	// mu serialises syncs: the watch loop and the certificate manager both write.
	mu     sync.Mutex
	groups []pathGroup
	// extra, when set, gives files written alongside the trust files in the same swap:
	// the workload certificate and key, so they never mismatch.
	extra    func() map[string]File
	writer   Writer
	decoder  *decoder
	lastGood map[string][]byte
	reporter reporter
	metrics  *metrics
	clock    clock.PassiveClock
}

// syncResult is what one pass did.
type syncResult struct {
	changed bool
	// writeErr is set when nothing could be written at all.
	writeErr error
	// failed maps each held-back path to why.
	failed map[string]error
}

// Err summarises every failure in one line, paths in order.
func (r syncResult) Err() error {
	if len(r.failed) == 0 {
		return nil
	}
	paths := make([]string, 0, len(r.failed))
	for p := range r.failed {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var msgs []string
	for _, p := range paths {
		msgs = append(msgs, fmt.Sprintf("%s: %v", p, r.failed[p]))
	}
	return errors.New(strings.Join(msgs, "; "))
}

func newSyncer(groups []pathGroup, w Writer, r reporter, m *metrics, clk clock.PassiveClock) (*syncer, error) {
	s := &syncer{groups: groups, writer: w, decoder: newDecoder(), lastGood: map[string][]byte{}, reporter: r, metrics: m, clock: clk}
	// After a container restart the files of the previous run are the last good ones.
	current, err := w.Read()
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		if f, ok := current[g.path]; ok {
			s.lastGood[g.path] = f.Data
		}
	}
	return s, nil
}

// sync writes every path once from the current state.
func (s *syncer) sync() syncResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := s.clock.Now()
	res := syncResult{failed: map[string]error{}}
	payload := map[string]File{}
	anchors := map[string]int{}
	expiries := map[string]time.Time{}
	for _, g := range s.groups {
		content, n, expiry, err := s.render(g)
		if err != nil {
			res.failed[g.path] = err
			if last, ok := s.lastGood[g.path]; ok {
				payload[g.path] = File{Data: last, Mode: trustFileMode}
			}
			continue
		}
		payload[g.path] = File{Data: content, Mode: trustFileMode}
		anchors[g.path] = n
		expiries[g.path] = expiry
	}
	s.decoder.endSync()
	if s.extra != nil {
		for name, f := range s.extra() {
			payload[name] = f
		}
	}

	changed, err := s.writer.Write(payload)
	res.writeErr = err
	if err != nil {
		// Nothing new reached the directory; every path is as it was.
		for _, g := range s.groups {
			res.failed[g.path] = fmt.Errorf("cannot write: %w", err)
		}
	} else {
		res.changed = changed
		for p := range anchors {
			s.lastGood[p] = payload[p].Data
		}
	}
	s.metrics.observe(res, anchors, s.clock.Since(start))
	if err == nil {
		s.metrics.setAnchorExpiry(expiries)
	}
	s.reporter.report(res, anchors)
	return res
}

// render merges one path's items. An item that matched nothing is skipped when
// optional and fails the path otherwise; an item that is invalid fails the path
// whether optional or not, since it is a misconfiguration worth holding for.
func (s *syncer) render(g pathGroup) ([]byte, int, time.Time, error) {
	pool := tsbundle.NewPool()
	var errs []error
	for _, it := range g.items {
		anchors, err := it.from.anchors(s.decoder)
		switch {
		case err == nil:
			for _, a := range anchors {
				pool.AddAnchor(a)
			}
		case isNotFound(err) && it.source.Optional:
		default:
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, 0, time.Time{}, errors.Join(errs...)
	}
	return pool.PEM(), pool.Len(), pool.EarliestNotAfter(), nil
}

// reporter tells people what a sync did: logs always, Events on the pod on changes.
type reporter interface {
	report(res syncResult, anchors map[string]int)
}

// eventReporter logs every sync that changed something or failed, and records an
// Event on the pod when the failure changes (a new or different error) and when the
// sidecar recovers, so `kubectl describe pod` shows why a trust file is stale without
// an Event per retry.
type eventReporter struct {
	events   eventRecorder
	lastErr  string
	lastWarn time.Time
	clock    clock.PassiveClock
}

// eventRecorder is the piece of client-go's EventRecorder the sidecar uses.
type eventRecorder interface {
	warning(reason, message string)
	normal(reason, message string)
}

const (
	reasonSyncFailed  = "TrustBundleSyncFailed"
	reasonRecovered   = "TrustBundleSyncRecovered"
	repeatWarningTime = 10 * time.Minute
)

func (r *eventReporter) report(res syncResult, anchors map[string]int) {
	err := res.Err()
	switch {
	case err != nil:
		klog.ErrorS(err, "Trust files held at their last good content", "heldPaths", len(res.failed))
		// Repeat an unchanged failure now and then, so it does not age out of the
		// pod's Events while it lasts.
		if msg := err.Error(); msg != r.lastErr || r.clock.Since(r.lastWarn) > repeatWarningTime {
			r.events.warning(reasonSyncFailed, "Keeping the last good trust files: "+msg)
			r.lastErr, r.lastWarn = msg, r.clock.Now()
		}
	case r.lastErr != "":
		klog.InfoS("Trust files are current again", "anchors", anchors)
		r.events.normal(reasonRecovered, "Trust files are current again")
		r.lastErr = ""
	}
	if res.changed {
		klog.InfoS("Wrote trust files", "anchors", anchors)
	}
}
