package trustreport

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
)

// ToUnstructured encodes a report for a dynamic client.
func ToUnstructured(r *NodeTrustReport) (*unstructured.Unstructured, error) {
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

// UnreadableByNode says, by node, why its report could not be read (what
// query.Cluster.Unreadable takes).
func (l Listing) UnreadableByNode() map[string]string {
	out := make(map[string]string, len(l.Unreadable))
	for _, u := range l.Unreadable {
		out[u.Node] = u.Err
	}
	return out
}

// List reads every node's report. One report that cannot be read, or is stale (see
// Stale), is skipped and named, never the end of the answer: one bad object must not
// blind every reader, and an old one must not speak for pods that moved on. Every
// reader (the plugin, the rotation gate, the federation controller) reads through
// here or FromObjects, so they judge a report alike.
func List(ctx context.Context, dyn dynamic.Interface) (Listing, error) {
	list, err := dyn.Resource(Resource).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return Listing{}, nil
	}
	if err != nil {
		return Listing{}, fmt.Errorf("list NodeTrustReports: %w", err)
	}
	objs := make([]any, len(list.Items))
	for i := range list.Items {
		objs[i] = &list.Items[i]
	}
	return FromObjects(objs, time.Now()), nil
}

// FromObjects judges the reports a list or a watch's cache holds
// (*unstructured.Unstructured) at now, as List does.
func FromObjects(objs []any, now time.Time) Listing {
	l := Listing{Served: true}
	for _, obj := range objs {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		r, err := FromUnstructured(u)
		if err != nil {
			l.Unreadable = append(l.Unreadable, Unreadable{Node: u.GetName(), Err: err.Error()})
			continue
		}
		if err := r.Stale(now); err != nil {
			l.Unreadable = append(l.Unreadable, Unreadable{Node: r.Name, Err: err.Error()})
			continue
		}
		l.Reports = append(l.Reports, r)
	}
	return l
}
