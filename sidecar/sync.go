package sidecar

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/sidecar/contract"
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
	// sets and passwords say what each path's last good content holds and, for a
	// truststore, its password: a store is encoded again only when either changes.
	sets      map[string][sha256.Size]byte
	passwords map[string]string
	clock     clock.PassiveClock
	// observers are told of every sync and of what the app then holds, in order: the
	// metrics, expiry warnings, the reloader, the Events and logs. Which of them a
	// sidecar has is the list, not a set of optional fields.
	observers []observer
	// certificate says a workload certificate belongs to the state the app waits for.
	certificate bool
	// readDisk is done on the first sync: what a previous run left is the state
	// the app has, if it has one.
	readDisk bool
}

// wroteState is what one sync did and what the app holds after it, as the observers
// are told of it.
type wroteState struct {
	res  syncResult
	took time.Duration
	// anchors, expiries and files are, per path written, its number of anchors, when
	// its first anchor expires, and its anchors; empty when nothing could be written.
	anchors  map[string]int
	expiries map[string]time.Time
	files    map[string][]*tsbundle.Anchor
	// appState identifies what the app is given and says whether every file it waits
	// for is in it (syncer.state); computed only by an observer that asks, during
	// the sync.
	appState func() (state string, complete bool)
	// fromDisk: nothing was synced; these are the files a previous run left, found
	// at start-up, which is what the app has.
	fromDisk bool
}

// written reports whether the sync reached the directory.
func (w wroteState) written() bool { return !w.fromDisk && w.res.writeErr == nil }

// observer is told of each sync.
type observer interface {
	wrote(w wroteState)
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

func newSyncer(groups []pathGroup, w Writer, clk clock.PassiveClock, observers ...observer) (*syncer, error) {
	s := &syncer{groups: groups, writer: w, decoder: newDecoder(), lastGood: map[string][]byte{}, sets: map[string][sha256.Size]byte{},
		passwords: map[string]string{}, clock: clk, observers: observers}
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

// rendered is one path's new content.
type rendered struct {
	content  []byte
	pool     *tsbundle.Pool
	set      [sha256.Size]byte
	password string
}

// sync writes every path once from the current state.
func (s *syncer) sync() syncResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := s.clock.Now()
	var extra map[string]File
	if s.extra != nil {
		extra = s.extra()
	}
	if !s.readDisk {
		s.readDisk = true
		s.readLastGood()
		s.tell(wroteState{fromDisk: true, appState: func() (string, bool) { return s.state(extra) }})
	}
	res := syncResult{failed: map[string]error{}}
	payload := map[string]File{}
	written := map[string]rendered{}
	for _, g := range s.groups {
		r, err := s.render(g)
		if err != nil {
			res.failed[g.path] = err
			if last, ok := s.lastGood[g.path]; ok {
				payload[g.path] = File{Data: last, Mode: trustFileMode}
			}
			continue
		}
		payload[g.path] = File{Data: r.content, Mode: trustFileMode}
		written[g.path] = r
	}
	s.decoder.endSync()
	for name, f := range extra {
		payload[name] = f
	}

	changed, err := s.writer.Write(payload)
	res.writeErr = err
	anchors := map[string]int{}
	expiries := map[string]time.Time{}
	files := map[string][]*tsbundle.Anchor{}
	if err != nil {
		// Nothing new reached the directory; every path is as it was.
		for _, g := range s.groups {
			res.failed[g.path] = fmt.Errorf("cannot write: %w", err)
		}
	} else {
		res.changed = changed
		for p, r := range written {
			s.lastGood[p], s.sets[p], s.passwords[p] = r.content, r.set, r.password
			anchors[p] = r.pool.Len()
			expiries[p] = r.pool.EarliestNotAfter()
			files[p] = r.pool.Anchors()
		}
	}
	s.tell(wroteState{res: res, took: s.clock.Since(start), anchors: anchors, expiries: expiries, files: files,
		appState: func() (string, bool) { return s.state(extra) }})
	return res
}

func (s *syncer) tell(w wroteState) {
	for _, o := range s.observers {
		o.wrote(w)
	}
}

// render merges one path's items and encodes them in the path's format. An item
// that matched nothing is skipped when optional and fails the path otherwise; an item
// that is invalid fails the path whether optional or not, since it is a
// misconfiguration worth holding for.
func (s *syncer) render(g pathGroup) (rendered, error) {
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
		return rendered{}, errors.Join(errs...)
	}
	r := rendered{pool: pool, set: pool.SetSum()}
	if g.format != contract.FormatPEM {
		var err error
		if r.password, err = g.password.get(); err != nil {
			return rendered{}, err
		}
	}
	// A file is encoded again only when what it holds changed: a truststore is salted
	// afresh at each encoding, so its file (and anything watching it) would change for
	// nothing; a PEM file would be the same bytes, encoded for the garbage collector.
	if last, ok := s.lastGood[g.path]; ok && s.sets[g.path] == r.set && s.passwords[g.path] == r.password {
		r.content = last
		return r, nil
	}
	if g.format == contract.FormatPEM {
		r.content = pool.PEM()
		return r, nil
	}
	var err error
	if r.content, err = encodeStore(g.format, pool.Anchors(), r.password); err != nil {
		return rendered{}, fmt.Errorf("cannot encode the %s truststore: %w", g.format, err)
	}
	return r, nil
}

// readLastGood learns what the files a previous run left hold, so that a restarted
// sidecar neither re-encodes a truststore nor tells the app of a change that is none.
// A file it cannot read back is simply written anew.
func (s *syncer) readLastGood() {
	for _, g := range s.groups {
		data, ok := s.lastGood[g.path]
		if !ok {
			continue
		}
		pool := tsbundle.NewPool()
		password := ""
		if g.format == contract.FormatPEM {
			if err := pool.AddPEM(data); err != nil {
				continue
			}
		} else {
			var err error
			if password, err = g.password.get(); err != nil {
				continue
			}
			ders, err := decodeStore(g.format, data, password)
			if err != nil {
				klog.InfoS("Cannot read back the truststore a previous run wrote; writing it anew", "path", g.path, "err", err)
				continue
			}
			for _, der := range ders {
				pool.AddDER(der)
			}
		}
		s.sets[g.path], s.passwords[g.path] = pool.SetSum(), password
	}
}

// state identifies what the app is given: the set of anchors of every file and the
// workload certificate; complete says every file it waits for is there.
func (s *syncer) state(extra map[string]File) (string, bool) {
	var b strings.Builder
	complete := true
	for _, g := range s.groups {
		set, ok := s.sets[g.path]
		if !ok {
			complete = complete && g.optional()
			continue
		}
		fmt.Fprintf(&b, "%s=%x;", g.path, set)
	}
	if s.certificate {
		crt, ok := extra[contract.FileCertificate]
		complete = complete && ok
		fmt.Fprintf(&b, "%s=%x", contract.FileCertificate, sha256.Sum256(crt.Data))
	}
	return b.String(), complete
}

// eventReporter logs every sync that changed something or failed, and records an
// Event on the pod when the failure changes (a new or different error) and when the
// sidecar recovers, so `kubectl describe pod` shows why a trust file is stale without
// an Event per retry.
type eventReporter struct {
	events  eventRecorder
	failing failureEvents
}

// failureEvents decides when a lasting failure earns a Warning Event: when it is new or
// different, and again every repeatWarningTime while it lasts, so it does not age out
// of the pod's Events; never once per retry.
type failureEvents struct {
	clock    clock.PassiveClock
	lastErr  string
	lastWarn time.Time
}

// due reports whether msg should be recorded now, and notes that it was.
func (f *failureEvents) due(msg string) bool {
	if msg == f.lastErr && f.clock.Since(f.lastWarn) <= repeatWarningTime {
		return false
	}
	f.lastErr, f.lastWarn = msg, f.clock.Now()
	return true
}

// recovered reports whether a failure was being reported, and forgets it.
func (f *failureEvents) recovered() bool {
	was := f.lastErr != ""
	f.lastErr = ""
	return was
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

// wrote logs and records what a sync did; what a previous run left is not news.
func (r *eventReporter) wrote(w wroteState) {
	if !w.fromDisk {
		r.report(w.res, w.anchors)
	}
}

func (r *eventReporter) report(res syncResult, anchors map[string]int) {
	err := res.Err()
	switch {
	case err != nil:
		klog.ErrorS(err, "Trust files held at their last good content", "heldPaths", len(res.failed))
		if msg := err.Error(); r.failing.due(msg) {
			r.events.warning(reasonSyncFailed, "Keeping the last good trust files: "+msg)
		}
	case r.failing.recovered():
		klog.InfoS("Trust files are current again", "anchors", anchors)
		r.events.normal(reasonRecovered, "Trust files are current again")
	}
	if res.changed {
		klog.InfoS("Wrote trust files", "anchors", anchors)
	}
}
