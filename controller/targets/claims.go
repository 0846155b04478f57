package targets

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/controller/objects"
)

// claim is one TrustTarget's claim on an object name: the ConfigMap (or Secret)
// object in every namespace selector picks.
type claim struct {
	target   string
	created  time.Time
	kind     objects.Kind
	object   string
	selector labels.Selector
}

// claimOf is the claim target t makes, or false when it makes none it could act on
// (its spec is invalid, or it names a Secret it may not write).
func claimOf(u *unstructured.Unstructured, secrets func(name string) bool) (claim, bool) {
	t, err := v1alpha1.TrustTargetFromUnstructured(u)
	if err != nil {
		return claim{}, false
	}
	spec, err := v1alpha1.ParseTrustTargetSpec(&t.Spec)
	if err != nil || (spec.Kind == v1alpha1.KindSecret && !secrets(spec.Name)) {
		return claim{}, false
	}
	return claim{target: t.Name, created: t.CreationTimestamp.Time, kind: objects.KindNamed(spec.Kind), object: spec.Name, selector: spec.Namespaces}, true
}

// claims are every TrustTarget's claims, oldest first (then by name): the order in
// which two claims on one object are settled.
func claims(store []any, secrets func(name string) bool) []claim {
	var out []claim
	for _, obj := range store {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			if cl, ok := claimOf(u, secrets); ok {
				out = append(out, cl)
			}
		}
	}
	slices.SortFunc(out, func(a, b claim) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.target, b.target)
	})
	return out
}

// writer says which target writes kind/object in namespace ns, and which others
// claim it too. One object has one writer, settled the same way by every
// reconcile so that two targets never take turns: the target whose label the object
// carries while it still claims it, else the oldest claimant. "" when none claims it.
func writer(all []claim, ns *corev1.Namespace, kind objects.Kind, object, labelled string) (string, []string) {
	var claimants []string
	for _, cl := range all {
		if cl.kind == kind && cl.object == object && cl.selector.Matches(labels.Set(ns.Labels)) {
			claimants = append(claimants, cl.target)
		}
	}
	if len(claimants) == 0 {
		return "", nil
	}
	w := claimants[0]
	if slices.Contains(claimants, labelled) {
		w = labelled
	}
	return w, slices.DeleteFunc(claimants, func(t string) bool { return t == w })
}
