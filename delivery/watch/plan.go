package watch

import (
	"errors"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/delivery/render"
)

// Holder is what a plan's sources are read from: a Set, or a fake in tests.
type Holder interface {
	Bundles(key string) []*certificatesv1.ClusterTrustBundle
	ConfigMap(name string) (*corev1.ConfigMap, bool)
	Secret(name string) (*corev1.Secret, bool)
}

// RequestFor is the watches plan's sources need, its ConfigMaps and Secrets read
// through client as clientKey (see Request). Every reader of a plan (a pod's
// pipeline, a TrustTarget) asks through it, so that a selection is watched under the
// same key, and so shared, whoever asks.
func RequestFor(plan *render.Plan, client rest.Interface, clientKey string) Request {
	req := Request{Bundles: map[string]tsbundle.Selector{}, Namespace: plan.Namespace(), ConfigMaps: plan.ConfigMaps(), Secrets: plan.Secrets(),
		Client: client, ClientKey: clientKey}
	for _, sel := range plan.Selectors() {
		req.Bundles[sel.Key] = sel.Selector
	}
	return req
}

// ErrUndecided wraps an admission that cannot be decided yet (the grants are not
// known): the bundle is neither rendered nor taken out, and its file keeps what it
// holds until the verdict is known.
var ErrUndecided = errors.New("undecided")

// SnapshotOf is what from holds now of plan's sources, the render stage's input.
// admit, when set, says which bundles may be rendered: nil admits; one it refuses is
// held apart (render.Snapshot.Refused), rendered as granting nothing, so the file is
// rewritten without it; one it cannot decide (ErrUndecided) is held apart too, and
// fails its file, which keeps its last good content.
func SnapshotOf(plan *render.Plan, from Holder, admit func(*certificatesv1.ClusterTrustBundle) error) render.Snapshot {
	s := render.Snapshot{Bundles: map[string][]*certificatesv1.ClusterTrustBundle{}, ConfigMaps: map[string]*corev1.ConfigMap{},
		Secrets: map[string]*corev1.Secret{}}
	for _, sel := range plan.Selectors() {
		bundles := from.Bundles(sel.Key)
		if admit != nil {
			var admitted []*certificatesv1.ClusterTrustBundle
			for _, b := range bundles {
				switch err := admit(b); {
				case err == nil:
					admitted = append(admitted, b)
				case errors.Is(err, ErrUndecided):
					s.Withhold(sel.Key, b, true)
				default:
					s.Withhold(sel.Key, b, false)
				}
			}
			bundles = admitted
		}
		s.Bundles[sel.Key] = bundles
	}
	for _, name := range plan.ConfigMaps() {
		if cm, ok := from.ConfigMap(name); ok {
			s.ConfigMaps[name] = cm
		}
	}
	for _, name := range plan.Secrets() {
		if sec, ok := from.Secret(name); ok {
			s.Secrets[name] = sec
		}
	}
	return s
}
