// Package trustreport reads the nodes' NodeTrustReports (v1alpha1) for the answers built
// on them: every report that can be used, and each that cannot with why, so that one
// unreadable report hides only its own node.
package trustreport

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// Unreadable is a report a reader skipped, and why: its node's pods are not
// observed, and everything else is still answered.
type Unreadable struct {
	Node string `json:"node"`
	Err  string `json:"error"`
}

// Listing is every node's report that could be read, and those that could not.
type Listing struct {
	Reports    []*v1alpha1.NodeTrustReport
	Unreadable []Unreadable
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
	list, err := dyn.Resource(v1alpha1.NodeTrustReportResource).List(ctx, metav1.ListOptions{})
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

// FromObjects judges the reports a list or a watch's cache holds at now, as List does:
// *unstructured.Unstructured as listed, or what Decode made of them in a watch's
// cache.
func FromObjects(objs []any, now time.Time) Listing {
	var l Listing
	for _, obj := range objs {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			obj, _ = Decode(u)
		}
		switch r := obj.(type) {
		case *Undecodable:
			l.Unreadable = append(l.Unreadable, Unreadable{Node: r.Name, Err: r.Err})
		case *v1alpha1.NodeTrustReport:
			if err := r.Stale(now); err != nil {
				l.Unreadable = append(l.Unreadable, Unreadable{Node: r.Name, Err: err.Error()})
				continue
			}
			l.Reports = append(l.Reports, r)
		}
	}
	return l
}

// Undecodable is a report that could not be decoded, as a watch's cache keeps it: its
// name and why.
type Undecodable struct {
	metav1.ObjectMeta
	Err string
}

// Decode is a watched report as a cache should keep it (an informer's transform):
// decoded once, as it arrives, without its managed fields, or Undecodable. A
// thousand nodes' reports of ten pods each, kept as unstructured maps, cost a reader
// 2.6 KiB a pod, and were decoded again at every read.
func Decode(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	r, err := v1alpha1.NodeTrustReportFromUnstructured(u)
	if err != nil {
		return &Undecodable{ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), ResourceVersion: u.GetResourceVersion()}, Err: err.Error()}, nil
	}
	r.ManagedFields = nil
	return r, nil
}
