package targets

import (
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

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

// claimSet is every TrustTarget's claims by the object they name, each object's
// oldest first (then by name): the order in which two claims on one object are
// settled. A reconcile asks it about each namespace it writes, so an object's
// claimants are found without looking at every target's.
type claimSet map[objectName][]claim

type objectName struct {
	kind   objects.Kind
	object string
}

// claimCache keeps each target's claim for the resourceVersion it was parsed at:
// parsing every target's spec at every reconcile cost 15 ms at 1,000 targets, and
// grew with the square of them when each of them was reconciled.
type claimCache struct {
	mu     sync.Mutex
	parsed map[types.UID]parsedClaim
}

type parsedClaim struct {
	resourceVersion string
	claim           claim
	ok              bool
}

// claims are the claims of the targets in store, a target parsed again only when it
// changed (a new resourceVersion, or none known).
func (cc *claimCache) claims(store []any, secrets func(name string) bool) claimSet {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	parsed := make(map[types.UID]parsedClaim, len(store))
	set := claimSet{}
	for _, obj := range store {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		uid, rv := u.GetUID(), u.GetResourceVersion()
		p, cached := cc.parsed[uid]
		if !cached || rv == "" || uid == "" || p.resourceVersion != rv {
			p = parsedClaim{resourceVersion: rv}
			p.claim, p.ok = claimOf(u, secrets)
		}
		if uid != "" {
			parsed[uid] = p
		}
		if p.ok {
			key := objectName{p.claim.kind, p.claim.object}
			set[key] = append(set[key], p.claim)
		}
	}
	cc.parsed = parsed
	for _, cls := range set {
		slices.SortFunc(cls, func(a, b claim) int {
			if c := a.created.Compare(b.created); c != 0 {
				return c
			}
			return strings.Compare(a.target, b.target)
		})
	}
	return set
}

// writer says which target writes kind/object in namespace ns, and which others
// claim it too. One object has one writer, settled the same way by every
// reconcile so that two targets never take turns: the target whose label the object
// carries while it still claims it, else the oldest claimant. "" when none claims it.
func writer(all claimSet, ns *corev1.Namespace, kind objects.Kind, object, labelled string) (string, []string) {
	var claimants []string
	for _, cl := range all[objectName{kind, object}] {
		if cl.selector.Matches(labels.Set(ns.Labels)) {
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
