package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/agent/holdings"
	"github.com/trustsync/trustsync/api/v1alpha1"
)

// BuildReport makes node's report of what its pods hold, with anchor sets deduplicated,
// pods and sets in a stable order, and within MaxBytes.
func BuildReport(node string, held []holdings.Pod, now time.Time) *v1alpha1.NodeTrustReport {
	r := &v1alpha1.NodeTrustReport{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.NodeTrustReportKind},
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Node:       node, UpdatedAt: metav1.NewTime(now.UTC().Truncate(time.Second)),
	}
	sets := map[string]v1alpha1.AnchorSet{}
	for _, p := range held {
		ph := v1alpha1.PodHolding{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Files: []v1alpha1.FileHolding{}}
		for _, f := range p.Files {
			fh := v1alpha1.FileHolding{Path: f.Path(), Volume: f.Volume, File: f.File, Delivery: string(f.Delivery), Error: f.Err}
			if f.SubPath != nil {
				fh.SubPathContainer = f.SubPath.Container
			}
			if !f.ChangedAt.IsZero() {
				t := metav1.NewMicroTime(f.ChangedAt.UTC())
				fh.ChangedAt = &t
			}
			if f.Err == "" {
				id := v1alpha1.AnchorSetID(f.Anchors)
				sets[id] = v1alpha1.AnchorSet{ID: id, Anchors: f.Anchors, Count: len(f.Anchors)}
				fh.AnchorSet = id
			}
			ph.Files = append(ph.Files, fh)
		}
		r.Pods = append(r.Pods, ph)
	}
	slices.SortFunc(r.Pods, func(a, b v1alpha1.PodHolding) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	for _, s := range sets {
		r.AnchorSets = append(r.AnchorSets, s)
	}
	slices.SortFunc(r.AnchorSets, func(a, b v1alpha1.AnchorSet) int { return strings.Compare(a.ID, b.ID) })
	r.Bound()
	return r
}

// ReportPublisher keeps a node's report current: it scans often, so that a change is seen
// within ScanEvery, but writes at most every MinInterval, and only when what the
// pods hold changed (or Heartbeat passed), so that API writes grow with nodes and
// changes, not with pods or time.
type ReportPublisher struct {
	Client dynamic.ResourceInterface
	Node   string
	// Owner, the node's Node object, makes the garbage collector remove the report
	// once the node is gone.
	Owner *metav1.OwnerReference
	// Scan observes the node's pods and says whether anything changed.
	Scan        func() ([]holdings.Pod, bool)
	ScanEvery   time.Duration
	MinInterval time.Duration
	Heartbeat   time.Duration
	Clock       clock.WithTicker
	// Wrote, when set, is told of each write's outcome.
	Wrote func(error)
	// Idle, when set, is told after each scan that leaves nothing to write: the
	// report in the API says what the pods held at that scan.
	Idle func()

	last            *v1alpha1.NodeTrustReport
	resourceVersion string
	lastWrite       time.Time
}

// Run publishes until ctx is done.
func (p *ReportPublisher) Run(ctx context.Context) {
	if p.Clock == nil {
		p.Clock = clock.RealClock{}
	}
	ticker := p.Clock.NewTicker(p.ScanEvery)
	defer ticker.Stop()
	pending := true
	for {
		held, changed := p.Scan()
		pending = pending || changed
		now := p.Clock.Now()
		since := now.Sub(p.lastWrite)
		if (pending && since >= p.MinInterval) || since >= p.Heartbeat {
			r := BuildReport(p.Node, held, now)
			// Readers judge the report stale by the heartbeat it says.
			r.HeartbeatSeconds = int64(p.Heartbeat / time.Second)
			if since < p.Heartbeat && v1alpha1.SameHoldings(r, p.last) {
				pending = false
			} else {
				err := p.write(ctx, r)
				if p.Wrote != nil {
					p.Wrote(err)
				}
				if err != nil {
					klog.ErrorS(err, "Cannot write the node's trust report; retrying", "report", p.Node)
					p.lastWrite = now // retry after MinInterval, not at every scan
				} else {
					pending, p.last, p.lastWrite = false, r, now
					klog.V(4).InfoS("Wrote the node's trust report", "report", p.Node, "pods", len(r.Pods), "anchorSets", len(r.AnchorSets))
				}
			}
		}
		if !pending && p.Idle != nil {
			p.Idle()
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// write replaces the report with r, creating it the first time. It updates with the
// resourceVersion it last wrote, so it reads the report only when another writer (an
// earlier agent) got there first.
func (p *ReportPublisher) write(ctx context.Context, r *v1alpha1.NodeTrustReport) error {
	if p.Owner != nil {
		r.OwnerReferences = []metav1.OwnerReference{*p.Owner}
	}
	for attempt := 0; ; attempt++ {
		if p.resourceVersion == "" {
			cur, err := p.Client.Get(ctx, r.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				obj, err := r.ToUnstructured()
				if err != nil {
					return err
				}
				created, err := p.Client.Create(ctx, obj, metav1.CreateOptions{FieldManager: "trustsync-agent"})
				if err != nil {
					return fmt.Errorf("create NodeTrustReport %s: %w", r.Name, err)
				}
				p.resourceVersion = created.GetResourceVersion()
				return nil
			case err != nil:
				return fmt.Errorf("read NodeTrustReport %s: %w", r.Name, err)
			}
			p.resourceVersion = cur.GetResourceVersion()
		}
		r.ResourceVersion = p.resourceVersion
		obj, err := r.ToUnstructured()
		if err != nil {
			return err
		}
		updated, err := p.Client.Update(ctx, obj, metav1.UpdateOptions{FieldManager: "trustsync-agent"})
		if err == nil {
			p.resourceVersion = updated.GetResourceVersion()
			return nil
		}
		p.resourceVersion = ""
		if attempt > 0 || !(apierrors.IsConflict(err) || apierrors.IsNotFound(err)) {
			return fmt.Errorf("update NodeTrustReport %s: %w", r.Name, err)
		}
	}
}
