package signer

import (
	"context"
	"crypto/x509"
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
}

// liveName is the live bundle's name in upstream form.
func liveName(signer string) string {
	return bundle.NamePrefix(signer, bundle.NativeForm) + LiveValue
}

// publish makes every served API's live bundle hold exactly anchors, creating or
// restoring it if it was deleted or edited.
func (p *publisher) publish(ctx context.Context, anchors []*x509.Certificate) error {
	pool := bundle.NewPool()
	for _, a := range anchors {
		pool.AddDER(a.Raw)
	}
	want := string(pool.PEM())
	for _, s := range p.stores {
		if err := p.publishTo(ctx, s, want); err != nil {
			return err
		}
	}
	return nil
}

func (p *publisher) publishTo(ctx context.Context, s *bundleapi.Store, trustBundle string) error {
	name := liveName(p.signer)
	got, err := s.Get(ctx, name)
	if apierrors.IsNotFound(err) {
		_, err = s.Create(ctx, &certificatesv1.ClusterTrustBundle{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LiveLabel: LiveValue}},
			Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: p.signer, TrustBundle: trustBundle},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("failed to create ClusterTrustBundle %q in %s: %w", name, s.API(), err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to get ClusterTrustBundle %q from %s: %w", name, s.API(), err)
	}
	if got.Spec.TrustBundle == trustBundle && got.Labels[LiveLabel] == LiveValue {
		return nil
	}
	got.Spec.TrustBundle = trustBundle
	if got.Labels == nil {
		got.Labels = map[string]string{}
	}
	got.Labels[LiveLabel] = LiveValue
	if _, err := s.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("failed to update ClusterTrustBundle %q in %s: %w", name, s.API(), err)
	}
	return nil
}
