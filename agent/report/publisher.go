package report

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/agent/holdings"
)

// Publisher keeps a node's report current: it scans often, so that a change is seen
// within ScanEvery, but writes at most every MinInterval, and only when what the
// pods hold changed (or Heartbeat passed), so that API writes grow with nodes and
// changes, not with pods or time.
type Publisher struct {
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

	last            *NodeTrustReport
	resourceVersion string
	lastWrite       time.Time
}

// Run publishes until ctx is done.
func (p *Publisher) Run(ctx context.Context) {
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
			r := Build(p.Node, held, now)
			if since < p.Heartbeat && SameHoldings(r, p.last) {
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
func (p *Publisher) write(ctx context.Context, r *NodeTrustReport) error {
	if p.Owner != nil {
		r.OwnerReferences = []metav1.OwnerReference{*p.Owner}
	}
	for attempt := 0; ; attempt++ {
		if p.resourceVersion == "" {
			cur, err := p.Client.Get(ctx, r.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				obj, err := toUnstructured(r)
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
		obj, err := toUnstructured(r)
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

func toUnstructured(r *NodeTrustReport) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r)
	if err != nil {
		return nil, fmt.Errorf("encode NodeTrustReport %s: %w", r.Name, err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// FromUnstructured decodes a report read through a dynamic client, and checks what
// readers rely on: it is its node's (named after it), and its anchors are SHA-256s.
func FromUnstructured(u *unstructured.Unstructured) (*NodeTrustReport, error) {
	r := &NodeTrustReport{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, r); err != nil {
		return nil, fmt.Errorf("report of node %s unreadable: %w", u.GetName(), err)
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("report of node %s unreadable: %w", u.GetName(), err)
	}
	return r, nil
}

// check refuses what the schema lets through (reports written before it said so)
// and readers cannot use.
func (r *NodeTrustReport) check() error {
	if r.Node != r.Name {
		return fmt.Errorf("it names node %q, not its own (%q)", r.Node, r.Name)
	}
	for _, s := range r.AnchorSets {
		for _, a := range s.Anchors {
			if !IsAnchorID(a) {
				return fmt.Errorf("anchor set %s holds %q, which is not a SHA-256 (64 lowercase hex digits)", s.ID, a)
			}
		}
	}
	return nil
}

// IsAnchorID reports whether id is an anchor's SHA-256 as reports write it.
func IsAnchorID(id string) bool {
	if len(id) != 64 {
		return false
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Unreadable is a report a reader skipped, and why: its node's pods are not
// observed, and everything else is still answered.
type Unreadable struct {
	Node string `json:"node"`
	Err  string `json:"error"`
}

// Listing is every node's report that could be read, and those that could not.
type Listing struct {
	Reports    []*NodeTrustReport
	Unreadable []Unreadable
	// Served is false when the reports' API is not served (no agent reports in
	// this cluster), which is not an error.
	Served bool
}

// List reads every node's report. One report that cannot be read is skipped and
// named, never the end of the answer: one bad object must not blind every reader.
func List(ctx context.Context, dyn dynamic.Interface) (Listing, error) {
	list, err := dyn.Resource(Resource).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return Listing{}, nil
	}
	if err != nil {
		return Listing{}, fmt.Errorf("list NodeTrustReports: %w", err)
	}
	l := Listing{Served: true}
	for i := range list.Items {
		r, err := FromUnstructured(&list.Items[i])
		if err != nil {
			l.Unreadable = append(l.Unreadable, Unreadable{Node: list.Items[i].GetName(), Err: err.Error()})
			continue
		}
		l.Reports = append(l.Reports, r)
	}
	return l, nil
}
