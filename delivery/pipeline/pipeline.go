// Package pipeline runs one pod's trust files: on a change of its sources (or a new
// workload certificate, or the periodic resync) it renders, writes and tells its
// observers. One goroutine owns a pod's pipeline and everything it keeps; its inputs
// arrive on channels. The sidecar runs one; a node agent runs one per pod, over one
// shared set of watches.
package pipeline

import (
	"context"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/delivery/certificate"
	"github.com/trustsync/trustsync/delivery/observe"
	"github.com/trustsync/trustsync/delivery/render"
	"github.com/trustsync/trustsync/delivery/watch"
	"github.com/trustsync/trustsync/delivery/write"
)

// ResyncPeriod renders the files again even without a change, as a safety net;
// changes themselves arrive by watch within moments.
const ResyncPeriod = 5 * time.Minute

// Sources is what a pipeline reads its sources from: a watch.Set, or a fake in tests.
type Sources interface {
	Changed() <-chan struct{}
	watch.Holder
}

// Config is one pod's pipeline.
type Config struct {
	Plan    *render.Plan
	Sources Sources
	Writer  write.Writer
	// OnDisk is what the directory held when the pipeline started (Writer.Read): a
	// restarted pod's last good files.
	OnDisk map[string]render.File
	// Certificate is the workload certificate's files the pipeline starts with (one a
	// previous run wrote, adopted), nil without one yet.
	Certificate map[string]render.File
	// Observers are told of every sync, in order.
	Observers []observe.Observer
	Clock     clock.PassiveClock
	// Settled, when set, is called once, after the first sync that left no change
	// pending: the end of the pod's start-up.
	Settled func()
	// Admit, when set, says whether a bundle the sources hold may be written (nil):
	// one it refuses is left out of every file at each sync, the file rewritten
	// without it (so a grant withdrawn, or a bundle relabelled out of one, takes
	// effect at the next); one it cannot decide yet (watch.ErrUndecided) keeps its
	// file as it is (watch.SnapshotOf).
	Admit func(*certificatesv1.ClusterTrustBundle) error
	// Recheck, when set, asks for a sync whenever it receives: what Admit decides
	// may have changed (a TrustPolicy or a namespace did), and its sources did not.
	Recheck <-chan struct{}
}

// Pipeline is one pod's trust files. Its methods are called from one goroutine.
type Pipeline struct {
	cfg    Config
	offers chan certificate.Offer
	// cert is the certificate files written (or adopted); last what the directory
	// holds, nil before the first sync.
	cert map[string]render.File
	last *render.Rendering
}

// New returns the pipeline of cfg; nothing runs until Sync or Run.
func New(cfg Config) *Pipeline {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Pipeline{cfg: cfg, offers: make(chan certificate.Offer), cert: cfg.Certificate}
}

// Offers is where a certificate manager offers new certificates (certificate.OfferTo):
// Run writes each with the trust files and answers.
func (p *Pipeline) Offers() chan<- certificate.Offer { return p.offers }

// Sync renders the files from the sources as they are now, writes them in one swap,
// and tells the observers. The first sync first tells them what a previous run left.
func (p *Pipeline) Sync() observe.Written {
	start := p.cfg.Clock.Now()
	snap := p.snapshot()
	if p.last == nil {
		// Read back only now that the sources have listed: a truststore on disk opens
		// with the password its Secret holds.
		p.last = render.FromDisk(p.cfg.Plan, p.cfg.OnDisk, snap)
		p.tell(observe.Written{Now: p.last, FromDisk: true})
	}
	r := render.Render(p.cfg.Plan, snap, p.last)
	changed, err := p.cfg.Writer.Write(r.Files)
	w := observe.Written{Now: r, Changed: changed, WriteErr: err, Failed: r.Failed}
	if err != nil {
		// Nothing new reached the directory; every path is as it was.
		w.Now, w.Failed = p.last, map[string]error{}
		for _, path := range p.cfg.Plan.Paths() {
			w.Failed[path] = fmt.Errorf("cannot write: %w", err)
		}
	} else {
		p.last = r
	}
	w.Took = p.cfg.Clock.Since(start)
	p.tell(w)
	return w
}

// Install writes a new certificate's files with the trust files; on failure the
// pipeline keeps the certificate it had.
func (p *Pipeline) Install(files map[string]render.File) error { return p.install(files).WriteErr }

func (p *Pipeline) install(files map[string]render.File) observe.Written {
	previous := p.cert
	p.cert = files
	w := p.Sync()
	if w.WriteErr != nil {
		p.cert = previous
	}
	return w
}

func (p *Pipeline) tell(w observe.Written) {
	for _, o := range p.cfg.Observers {
		o.Wrote(w)
	}
}

// snapshot is what the sources hold now, and the certificate.
func (p *Pipeline) snapshot() render.Snapshot {
	s := watch.SnapshotOf(p.cfg.Plan, p.cfg.Sources, p.cfg.Admit)
	s.Certificate = p.cert
	return s
}

// Run keeps the files current until ctx is done: a sync at start, then one after each
// change of the sources, each Recheck, each certificate offered, and every
// ResyncPeriod. A write
// that failed (a full volume, say) is retried soon, backing off, not at the next
// resync minutes away.
func (p *Pipeline) Run(ctx context.Context) {
	failedWrites := 0
	next := ResyncPeriod
	note := func(w observe.Written) {
		if w.WriteErr == nil {
			failedWrites, next = 0, ResyncPeriod
			return
		}
		next = min(time.Second<<min(failedWrites, 6), time.Minute)
		failedWrites++
	}
	note(p.Sync())
	settled := p.cfg.Settled == nil
	for {
		if !settled && len(p.cfg.Sources.Changed()) == 0 {
			settled = true
			p.cfg.Settled()
		}
		resync := time.NewTimer(next)
		select {
		case <-ctx.Done():
			resync.Stop()
			return
		case <-p.cfg.Sources.Changed():
			note(p.Sync())
		case <-p.cfg.Recheck:
			note(p.Sync())
		case <-resync.C:
			note(p.Sync())
		case offer := <-p.offers:
			w := p.install(offer.Files)
			note(w)
			offer.Written <- w.WriteErr
		}
		resync.Stop()
	}
}
