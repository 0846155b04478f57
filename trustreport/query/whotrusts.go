package query

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// Holder is one pod's file holding an anchor, or one key of an object trustsync
// writes (Kind, Name, Key, Writer; no pod).
type Holder struct {
	Namespace string     `json:"namespace,omitempty"`
	Pod       string     `json:"pod,omitempty"`
	Node      string     `json:"node,omitempty"`
	Path      string     `json:"path,omitempty"`
	Delivery  string     `json:"delivery,omitempty"`
	ChangedAt *time.Time `json:"changedAt,omitempty"`
	Kind      string     `json:"kind,omitempty"`
	Name      string     `json:"name,omitempty"`
	Key       string     `json:"key,omitempty"`
	Writer    string     `json:"writer,omitempty"`
	// NotGranted: the holder's namespace is no longer granted any bundle holding
	// the anchor (a TrustPolicy changed since it was written).
	NotGranted bool `json:"notGranted,omitempty"`
}

// WhoTrusts lists every pod's file that holds anchor, by namespace, pod and path;
// namespace "" is every namespace. A report speaks for the pods its node runs: a pod
// counts only in the report of the node its spec names.
func (c Cluster) WhoTrusts(anchor, namespace string) []Holder {
	holders := c.holdersOfAnchors()
	reports := c.byNode()
	var out []Holder
	for _, pod := range c.Pods {
		if namespace != "" && pod.Namespace != namespace {
			continue
		}
		r := reports[pod.Spec.NodeName]
		held, ok := podIn(r, pod)
		if !ok {
			continue
		}
		for _, f := range held.Files {
			set, ok := r.Set(f.AnchorSet)
			if !ok || !slices.Contains(set.Anchors, anchor) {
				continue
			}
			h := Holder{Namespace: pod.Namespace, Pod: pod.Name, Node: r.Node, Path: f.Path, Delivery: f.Delivery,
				NotGranted: len(c.ungranted(holders, pod.Namespace, []string{anchor})) > 0}
			if f.ChangedAt != nil {
				t := f.ChangedAt.Time
				h.ChangedAt = &t
			}
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(a, b Holder) int {
		return strings.Compare(a.Namespace+"/"+a.Pod+"/"+a.Path, b.Namespace+"/"+b.Pod+"/"+b.Path)
	})
	return out
}

// podIn is the pod's entry in its node's report r.
func podIn(r *v1alpha1.NodeTrustReport, pod *corev1.Pod) (v1alpha1.PodHolding, bool) {
	if r == nil {
		return v1alpha1.PodHolding{}, false
	}
	for _, p := range r.Pods {
		if p.UID == string(pod.UID) {
			return p, true
		}
	}
	return v1alpha1.PodHolding{}, false
}
