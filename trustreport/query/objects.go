package query

import (
	"slices"
	"strings"

	"github.com/trustsync/trustsync/trustfiles"
)

// ObjectContent is one key of an object trustsync writes (a ConfigMap's or
// Secret's key, or a caBundle field) and the anchors it holds.
type ObjectContent struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Key       string `json:"key"`
	// Writer is who fills it: "TrustTarget NAME", or "annotation" for an object
	// annotated trustsync.io/inject.
	Writer string `json:"writer"`
	// Anchors are the anchor IDs it holds, sorted.
	Anchors []string `json:"-"`
}

// ObjectsHolding lists the objects' keys that hold anchor, in namespace ("" for
// every namespace and the cluster-scoped objects).
func (c Cluster) ObjectsHolding(anchor, namespace string) []Holder {
	holders := c.holdersOfAnchors()
	var out []Holder
	for _, o := range c.Contents {
		if (namespace == "" || o.Namespace == namespace) && slices.Contains(o.Anchors, anchor) {
			out = append(out, Holder{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Key: o.Key, Writer: o.Writer,
				NotGranted: len(c.ungranted(holders, o.Namespace, []string{anchor})) > 0})
		}
	}
	slices.SortFunc(out, func(a, b Holder) int {
		return strings.Compare(a.Namespace+"/"+a.Kind+"/"+a.Name+"/"+a.Key, b.Namespace+"/"+b.Kind+"/"+b.Name+"/"+b.Key)
	})
	return out
}

// EnvHolders lists the running pods (in namespace, "" for every one) reading a trust
// object through env or envFrom: what they hold cannot be seen, so after a compromise
// each may still hold any anchor its object held when it started.
func (c Cluster) EnvHolders(namespace string) []Straggler {
	var out []Straggler
	for _, pod := range c.Pods {
		if (namespace != "" && pod.Namespace != namespace) || !running(pod) {
			continue
		}
		var how []string
		for _, r := range trustfiles.EnvReaders(pod, c.Objects) {
			how = append(how, r.Describe())
		}
		if len(how) > 0 {
			out = append(out, Straggler{Namespace: pod.Namespace, Pod: pod.Name, Node: pod.Spec.NodeName, Reason: NotObservable, Detail: strings.Join(how, "; ")})
		}
	}
	slices.SortFunc(out, byPod)
	return out
}

// byPod orders stragglers by namespace and pod.
