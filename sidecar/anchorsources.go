package sidecar

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/crypto/x509roots/fallback/bundle"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/truststore"
	"github.com/trustsync/trustsync/sidecar/contract"
)

// notFoundError says a source matched nothing. For an optional source that is fine;
// for a required one it holds its file back.
type notFoundError struct{ what string }

func (e *notFoundError) Error() string { return e.what }

func isNotFound(err error) bool {
	var nf *notFoundError
	return errors.As(err, &nf)
}

// anchorSource gives one sources-list item's anchors from what is being watched.
type anchorSource interface {
	anchors(d *decoder) ([]*tsbundle.Anchor, error)
}

// pathGroup is every item writing one file, in one format (the items agree on it).
type pathGroup struct {
	path   string
	format string
	// password is a truststore's password source; nil means the default password.
	password *passwordSource
	items    []item
}

type item struct {
	source contract.Source
	from   anchorSource
}

// optional is upstream's rule, per path: optional only if every item is.
func (g pathGroup) optional() bool {
	for _, it := range g.items {
		if !it.source.Optional {
			return false
		}
	}
	return true
}

// groupByPath groups sources by path, in order of first appearance.
func groupByPath(sources []contract.Source) []pathGroup {
	var groups []pathGroup
	for _, s := range sources {
		i := slices.IndexFunc(groups, func(g pathGroup) bool { return g.path == s.Path })
		if i < 0 {
			groups = append(groups, pathGroup{path: s.Path, format: s.FileFormat()})
			i = len(groups) - 1
		}
		groups[i].items = append(groups[i].items, item{source: s})
	}
	return groups
}

// decoder keeps each source's last decoding (a bundle object's, a ConfigMap key's), so
// that a sync decodes only what changed: nothing for a source whose text is as it was,
// and for an edited one only the blocks the edit touched (tsbundle.DecodeEdited). A
// source unused in a sync is forgotten after it.
type decoder struct {
	mu         sync.Mutex
	last, used map[string]*tsbundle.Decoding
}

func newDecoder() *decoder {
	return &decoder{last: map[string]*tsbundle.Decoding{}, used: map[string]*tsbundle.Decoding{}}
}

// decode returns the anchors of text, the current content of the source named source.
func (d *decoder) decode(source, text string) ([]*tsbundle.Anchor, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
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

// endSync forgets the sources the last sync did not use.
func (d *decoder) endSync() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last, d.used = d.used, map[string]*tsbundle.Decoding{}
}

// bundleSource is a name or signerName item, watched in every served API: readers
// take the union of native and mirror bundles.
type bundleSource struct {
	selector tsbundle.Selector
	match    func(*certificatesv1.ClusterTrustBundle) bool
	stores   []cache.Store
}

func (s *bundleSource) anchors(d *decoder) ([]*tsbundle.Anchor, error) {
	var out []*tsbundle.Anchor
	matched := 0
	for _, store := range s.stores {
		for _, obj := range store.List() {
			b := obj.(*certificatesv1.ClusterTrustBundle)
			if !s.match(b) {
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
	}
	if matched == 0 {
		return nil, &notFoundError{what: s.describe()}
	}
	return out, nil
}

func (s *bundleSource) describe() string {
	if s.selector.Name != "" {
		return fmt.Sprintf("ClusterTrustBundle %q not found", s.selector.Name)
	}
	if s.selector.LabelSelector == nil {
		return fmt.Sprintf("signerName %q without a labelSelector matches no ClusterTrustBundle (use \"labelSelector\": {} for all of the signer's bundles)", s.selector.SignerName)
	}
	sel, _ := metav1.LabelSelectorAsSelector(s.selector.LabelSelector)
	return fmt.Sprintf("no ClusterTrustBundle for signerName %q matches labelSelector %q", s.selector.SignerName, sel.String())
}

// objectSource is a configMap or secret item, watched by name in the pod's namespace.
type objectSource struct {
	kind, namespace, name, key string
	store                      cache.Store
}

func (s *objectSource) anchors(d *decoder) ([]*tsbundle.Anchor, error) {
	obj, ok, err := s.store.GetByKey(s.namespace + "/" + s.name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &notFoundError{what: fmt.Sprintf("%s %s/%s not found", s.kind, s.namespace, s.name)}
	}
	var value string
	var has bool
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		value, has = o.Data[s.key]
		if !has {
			var b []byte
			b, has = o.BinaryData[s.key]
			value = string(b)
		}
	case *corev1.Secret:
		if o.Type != corev1.SecretTypeOpaque && o.Type != corev1.SecretTypeTLS && o.Type != "" {
			return nil, fmt.Errorf("type %q of Secret %s/%s may not hold trust anchors; only Opaque and kubernetes.io/tls Secrets may", o.Type, s.namespace, s.name)
		}
		var b []byte
		b, has = o.Data[s.key]
		value = string(b)
	}
	if !has {
		return nil, &notFoundError{what: fmt.Sprintf("%s %s/%s has no key %q", s.kind, s.namespace, s.name, s.key)}
	}
	anchors, err := d.decode(fmt.Sprintf("%s %s/%s %s", s.kind, s.namespace, s.name, s.key), value)
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s key %q: %w", s.kind, s.namespace, s.name, s.key, err)
	}
	if len(anchors) == 0 {
		return nil, &notFoundError{what: fmt.Sprintf("%s %s/%s key %q holds no certificate", s.kind, s.namespace, s.name, s.key)}
	}
	return anchors, nil
}

// defaultCAsSource is the public web roots. Roots that carry a distrust-after
// constraint are left out: a PEM file cannot express the constraint, and including
// them would trust certificates issued after their distrust date.
type defaultCAsSource struct{}

var publicRoots = sync.OnceValue(func() []*tsbundle.Anchor {
	var anchors []*tsbundle.Anchor
	for r := range bundle.Roots() {
		if r.Constraint == nil {
			anchors = append(anchors, tsbundle.NewAnchor(r.Certificate))
		}
	}
	return anchors
})

func (defaultCAsSource) anchors(*decoder) ([]*tsbundle.Anchor, error) { return publicRoots(), nil }

// passwordSource reads a truststore's password from a key of a Secret in the pod's
// namespace, watched like a Secret source so a new password re-encodes the store.
type passwordSource struct {
	path, namespace, name, key string
	store                      cache.Store
}

// get returns the password; a missing Secret, key or value fails the store's path
// (which keeps its last good content) with what to create.
func (p *passwordSource) get() (string, error) {
	if p == nil {
		return contract.DefaultStorePassword, nil
	}
	obj, ok, err := p.store.GetByKey(p.namespace + "/" + p.name)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("passwordSecret %s/%s (the password of %s) not found; create the Secret with the key %q, or drop passwordSecret to use the default password %q", p.namespace, p.name, p.path, p.key, contract.DefaultStorePassword)
	}
	v, has := obj.(*corev1.Secret).Data[p.key]
	switch {
	case !has:
		return "", fmt.Errorf("passwordSecret %s/%s (the password of %s) has no key %q", p.namespace, p.name, p.path, p.key)
	case len(v) == 0:
		return "", fmt.Errorf("passwordSecret %s/%s key %q (the password of %s) is empty; a truststore needs a password", p.namespace, p.name, p.key, p.path)
	}
	return string(v), nil
}

// encodeStore and decodeStore dispatch on a truststore's format.
func encodeStore(format string, anchors []*tsbundle.Anchor, password string) ([]byte, error) {
	if format == contract.FormatJKS {
		return truststore.EncodeJKS(anchors, password)
	}
	return truststore.EncodePKCS12(anchors, password)
}

func decodeStore(format string, data []byte, password string) ([][]byte, error) {
	if format == contract.FormatJKS {
		return truststore.DecodeJKS(data, password)
	}
	return truststore.DecodePKCS12(data, password)
}

// objectListWatch lists and watches one named ConfigMap or Secret: RBAC can grant
// list and watch on a resourceName when the request selects that name.
func objectListWatch(c rest.Interface, resource, namespace, name string) *cache.ListWatch {
	return cache.NewListWatchFromClient(c, resource, namespace, fields.OneTermEqualSelector("metadata.name", name))
}
