package render

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/crypto/x509roots/fallback/bundle"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/truststore"
)

// notFoundError says a source matched nothing. For an optional source that is fine;
// for a required one it holds its file back.
type notFoundError struct{ what string }

func (e *notFoundError) Error() string { return e.what }

func isNotFound(err error) bool {
	var nf *notFoundError
	return errors.As(err, &nf)
}

// itemAnchors gives one sources-list item's anchors from snap.
func itemAnchors(plan *Plan, it item, snap Snapshot, d *decoder) ([]*tsbundle.Anchor, error) {
	switch src := it.source; {
	case it.selector >= 0:
		return bundleAnchors(plan.selectors[it.selector], snap, d)
	case src.ConfigMap != nil:
		cm, ok := snap.ConfigMaps[src.ConfigMap.Name]
		if !ok {
			return nil, &notFoundError{what: fmt.Sprintf("ConfigMap %s/%s not found", plan.namespace, src.ConfigMap.Name)}
		}
		value, has := cm.Data[src.ConfigMap.Key]
		if !has {
			var b []byte
			b, has = cm.BinaryData[src.ConfigMap.Key]
			value = string(b)
		}
		return keyAnchors("ConfigMap", plan.namespace, src.ConfigMap, value, has, d)
	case src.Secret != nil:
		s, ok := snap.Secrets[src.Secret.Name]
		if !ok {
			return nil, &notFoundError{what: fmt.Sprintf("Secret %s/%s not found", plan.namespace, src.Secret.Name)}
		}
		if s.Type != corev1.SecretTypeOpaque && s.Type != corev1.SecretTypeTLS && s.Type != "" {
			return nil, fmt.Errorf("type %q of Secret %s/%s may not hold trust anchors; only Opaque and kubernetes.io/tls Secrets may", s.Type, plan.namespace, src.Secret.Name)
		}
		value, has := s.Data[src.Secret.Key]
		return keyAnchors("Secret", plan.namespace, src.Secret, string(value), has, d)
	case src.DefaultCAs:
		return publicRoots(), nil
	}
	return nil, fmt.Errorf("sources item for %s names no source", it.source.Path)
}

// bundleAnchors is the anchors of every bundle sel matches, in every served API:
// readers take the union of native and mirror bundles.
func bundleAnchors(sel BundleSelector, snap Snapshot, d *decoder) ([]*tsbundle.Anchor, error) {
	var out []*tsbundle.Anchor
	matched := 0
	for _, b := range snap.Bundles[sel.Key] {
		if !sel.match(b) {
			continue
		}
		// By UID: the native and the mirror object are different sources.
		anchors, err := d.decode("ClusterTrustBundle "+string(b.UID)+" "+b.Name, b.Spec.TrustBundle)
		if err != nil {
			return nil, fmt.Errorf("ClusterTrustBundle %q: %w", b.Name, err)
		}
		out = append(out, anchors...)
		matched++
	}
	for _, b := range snap.Undecided[sel.Key] {
		if sel.match(b) {
			return nil, fmt.Errorf("cannot tell yet whether ClusterTrustBundle %q may be trusted here: its file keeps what it holds", b.Name)
		}
	}
	if matched == 0 {
		for _, b := range snap.Refused[sel.Key] {
			if sel.match(b) {
				// Not granted: the selection grants nothing, and the file is
				// written without it (the pod's Event names it).
				return nil, nil
			}
		}
		return nil, &notFoundError{what: describe(sel.Selector)}
	}
	return out, nil
}

func describe(sel tsbundle.Selector) string {
	if sel.Name != "" {
		return fmt.Sprintf("ClusterTrustBundle %q not found", sel.Name)
	}
	if sel.LabelSelector == nil {
		return fmt.Sprintf("signerName %q without a labelSelector matches no ClusterTrustBundle (use \"labelSelector\": {} for all of the signer's bundles)", sel.SignerName)
	}
	ls, _ := metav1.LabelSelectorAsSelector(sel.LabelSelector)
	return fmt.Sprintf("no ClusterTrustBundle for signerName %q matches labelSelector %q", sel.SignerName, ls.String())
}

// keyAnchors decodes the value of one key of a ConfigMap or Secret.
func keyAnchors(kind, namespace string, ref *v1alpha1.KeyRef, value string, has bool, d *decoder) ([]*tsbundle.Anchor, error) {
	if !has {
		return nil, &notFoundError{what: fmt.Sprintf("%s %s/%s has no key %q", kind, namespace, ref.Name, ref.Key)}
	}
	anchors, err := d.decode(fmt.Sprintf("%s %s/%s %s", kind, namespace, ref.Name, ref.Key), value)
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s key %q: %w", kind, namespace, ref.Name, ref.Key, err)
	}
	if len(anchors) == 0 {
		return nil, &notFoundError{what: fmt.Sprintf("%s %s/%s key %q holds no certificate", kind, namespace, ref.Name, ref.Key)}
	}
	return anchors, nil
}

// publicRoots is the public web roots. Roots that carry a distrust-after constraint are
// left out: a PEM file cannot express the constraint, and including them would trust
// certificates issued after their distrust date.
var publicRoots = sync.OnceValue(func() []*tsbundle.Anchor {
	var anchors []*tsbundle.Anchor
	for r := range bundle.Roots() {
		if r.Constraint == nil {
			anchors = append(anchors, tsbundle.NewAnchor(r.Certificate))
		}
	}
	return anchors
})

// password is a truststore's password, read from its Secret key; a missing Secret, key
// or value fails the store's path (which keeps its last good content) with what to
// create.
func password(namespace string, g pathPlan, snap Snapshot) (string, error) {
	ref := g.password
	if ref == nil {
		return v1alpha1.DefaultStorePassword, nil
	}
	s, ok := snap.Secrets[ref.Name]
	if !ok {
		return "", fmt.Errorf("passwordSecret %s/%s (the password of %s) not found; create the Secret with the key %q, or drop passwordSecret to use the default password %q", namespace, ref.Name, g.path, ref.Key, v1alpha1.DefaultStorePassword)
	}
	v, has := s.Data[ref.Key]
	switch {
	case !has:
		return "", fmt.Errorf("passwordSecret %s/%s (the password of %s) has no key %q", namespace, ref.Name, g.path, ref.Key)
	case len(v) == 0:
		return "", fmt.Errorf("passwordSecret %s/%s key %q (the password of %s) is empty; a truststore needs a password", namespace, ref.Name, ref.Key, g.path)
	}
	return string(v), nil
}

// decoder keeps each source's last decoding (a bundle object's, a ConfigMap key's), so
// that a render decodes only what changed: nothing for a source whose text is as it
// was, and for an edited one only the blocks the edit touched (tsbundle.DecodeEdited).
// A source unused in a render is forgotten after it.
type decoder struct {
	last, used map[string]*tsbundle.Decoding
}

// decode returns the anchors of text, the current content of the source named source.
func (d *decoder) decode(source, text string) ([]*tsbundle.Anchor, error) {
	if dec, ok := d.used[source]; ok && dec.Text() == text {
		return dec.Anchors(), nil
	}
	dec, err := tsbundle.DecodeEdited(text, d.last[source])
	if err != nil {
		// Keep the last good decoding as the base for the edit that mends this one.
		if base, ok := d.last[source]; ok {
			d.used[source] = base
		}
		return nil, err
	}
	d.used[source] = dec
	return dec.Anchors(), nil
}

// encodeStore and decodeStore dispatch on a truststore's format.
func encodeStore(format, profile string, anchors []*tsbundle.Anchor, password string) ([]byte, error) {
	if format == v1alpha1.FormatJKS {
		return truststore.EncodeJKS(anchors, password)
	}
	return truststore.EncodePKCS12(anchors, password, profile)
}

func decodeStore(format string, data []byte, password string) ([][]byte, error) {
	if format == v1alpha1.FormatJKS {
		return truststore.DecodeJKS(data, password)
	}
	return truststore.DecodePKCS12(data, password)
}
