package signer

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
)

// LiveLabel marks the bundle holding a signer's current anchors, the convention the
// newer ClusterTrustBundle KEP proposes, so pods select it by label.
const (
	LiveLabel = "kubernetes.io/cluster-trust-bundle-version"
	LiveValue = "live"
)

// publisher keeps one signer's live bundle holding exactly its current anchors: in the
// native API when served, else in the mirror; when both are served, the mirror copy is
// kept identical, so an anchor retired from one never lingers in a reader's union.
type publisher struct {
	signer string
	stores []*bundleapi.Store
	// live, when set, holds each store's live bundle as a watch of it sees it
	// (aligned with stores): what holds already is not applied again.
	live []cache.Store
}

// liveBundles are the live bundles as the watches hold them, in upstream form.
func (p *publisher) liveBundles() ([]*certificatesv1.ClusterTrustBundle, error) {
	var out []*certificatesv1.ClusterTrustBundle
	for i := range p.stores {
		if b := p.cached(i); b != nil {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the live bundle %s is not published yet", liveName(p.signer))
	}
	return out, nil
}

// cached is store i's live bundle as its watch holds it, nil when not known.
func (p *publisher) cached(i int) *certificatesv1.ClusterTrustBundle {
	if i >= len(p.live) || p.live[i] == nil {
		return nil
	}
	obj, ok, err := p.live[i].GetByKey(liveName(p.signer))
	if err != nil || !ok {
		return nil
	}
	b, _ := obj.(*certificatesv1.ClusterTrustBundle)
	return b
}

// liveName is the live bundle's name in upstream form.
func liveName(signer string) string {
	return bundle.NamePrefix(signer, bundle.NativeForm) + LiveValue
}

// publish makes every served API's live bundle hold exactly anchors, creating or
// restoring it if it was deleted or edited, and tell where the rotation stands.
func (p *publisher) publish(ctx context.Context, anchors []*x509.Certificate, status bundle.RotationStatus) error {
	pool := bundle.NewPool()
	for _, a := range anchors {
		pool.AddDER(a.Raw)
	}
	want := string(pool.PEM())
	rotation, err := json.Marshal(status)
	if err != nil {
		return err
	}
	for i, s := range p.stores {
		if b := p.cached(i); b != nil && b.Spec.TrustBundle == want && b.Spec.SignerName == p.signer &&
			b.Labels[LiveLabel] == LiveValue && b.Annotations[bundle.RotationAnnotation] == string(rotation) {
			continue // as published; an edit or a deletion shows in the watch and is restored
		}
		if err := p.publishTo(ctx, s, want, string(rotation)); err != nil {
			return err
		}
	}
	return nil
}

// fieldManager is the signer's name in the live bundles' managedFields.
const fieldManager = "trustsync-signer"

// publishTo applies the live bundle's content, label, rotation annotation and signer:
// server-side apply owns exactly those fields, so other tools' labels and annotations
// on the bundle are never overwritten, and a deleted or edited bundle is restored by
// the same request.
func (p *publisher) publishTo(ctx context.Context, s *bundleapi.Store, trustBundle, rotation string) error {
	name := liveName(p.signer)
	_, err := s.Apply(ctx, &certificatesv1.ClusterTrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LiveLabel: LiveValue}, Annotations: map[string]string{bundle.RotationAnnotation: rotation}},
		Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: p.signer, TrustBundle: trustBundle},
	}, fieldManager)
	if err != nil {
		return fmt.Errorf("failed to apply ClusterTrustBundle %q to %s: %w", name, s.API(), err)
	}
	return nil
}
