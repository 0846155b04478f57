package objects

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// Secrets are narrowed to some names (the chart's targets.authorizedSecrets, as
// trust-manager's secretTargets.authorizedSecrets): RBAC then grants Secrets by
// resourceNames, which authorize a list or a watch only when it carries a
// metadata.name field selector. So each name is watched on its own, and what the
// controllers read of Secrets is the union of those watches. A few names cost a few
// watches; no name means one watch of every Secret, as before.

// SecretNotAuthorized is what a TrustTarget naming a Secret outside the names is told.
func SecretNotAuthorized(name string, names []string) string {
	return fmt.Sprintf("Secret %q is not one this controller may write: it may write Secrets named %s in any namespace (the chart's targets.authorizedSecrets, docs/targets.md); add the name there, or use another", name, strings.Join(names, ", "))
}

// PermitsSecret says whether a Secret of this name may be read and written.
func PermitsSecret(allowed bool, names []string, name string) bool {
	return allowed && (len(names) == 0 || slices.Contains(names, name))
}

// byName narrows a list or watch to the objects called name.
func byName(name string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
}

// WrittenSecrets watches the Secrets carrying the target label, of the names given
// (every name when none is): the listers to read them, the informers to handle and
// sync, and what starts them.
func WrittenSecrets(client kubernetes.Interface, resync time.Duration, names []string, labelled func(*metav1.ListOptions)) (SecretListers, []cache.SharedIndexInformer, []func(<-chan struct{})) {
	tweaks := []func(*metav1.ListOptions){labelled}
	if len(names) > 0 {
		tweaks = nil
		for _, n := range names {
			named := byName(n)
			tweaks = append(tweaks, func(o *metav1.ListOptions) { labelled(o); named(o) })
		}
	}
	var listers SecretListers
	var infs []cache.SharedIndexInformer
	var starts []func(<-chan struct{})
	for _, tweak := range tweaks {
		f := informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTweakListOptions(tweak))
		sec := f.Core().V1().Secrets()
		listers = append(listers, sec.Lister())
		infs = append(infs, sec.Informer())
		starts = append(starts, f.Start)
	}
	return listers, infs, starts
}

// ObjectMeta is the metadata-only watches both controllers read through: every
// ConfigMap, the caBundle kinds, and the Secrets (every one, or where names are given
// one watch a name, which RBAC can grant by resourceNames). Made once per process, so
// that two controllers reading a kind cost one watch of it, not two.
type ObjectMeta struct {
	shared  metadatainformer.SharedInformerFactory
	secrets []informers.GenericInformer
	starts  []func(<-chan struct{})
}

// NewObjectMeta watches through client; secretNames, when given, are the only Secrets
// watched.
func NewObjectMeta(client metadata.Interface, resync time.Duration, secretNames []string) *ObjectMeta {
	m := &ObjectMeta{shared: metadatainformer.NewSharedInformerFactory(client, resync)}
	for _, n := range secretNames {
		f := metadatainformer.NewFilteredSharedInformerFactory(client, resync, "", byName(n))
		m.secrets = append(m.secrets, f.ForResource(Secret.Resource))
		m.starts = append(m.starts, f.Start)
	}
	return m
}

// For is the watch of every object of kind, for any kind but Secret.
func (m *ObjectMeta) For(kind Kind) informers.GenericInformer {
	return m.shared.ForResource(kind.Resource)
}

// Secrets are the watches of the Secrets allowed: every Secret's, or one a name.
func (m *ObjectMeta) Secrets() []informers.GenericInformer {
	if len(m.secrets) == 0 {
		// The shared factory must not watch every Secret where names are given:
		// RBAC refuses it.
		return []informers.GenericInformer{m.shared.ForResource(Secret.Resource)}
	}
	return m.secrets
}

// Start starts every watch asked for so far (again is harmless: each starts once).
func (m *ObjectMeta) Start(stop <-chan struct{}) {
	m.shared.Start(stop)
	for _, start := range m.starts {
		start(stop)
	}
}

// SecretListers read the Secrets of several watches as one.
type SecretListers []corelisters.SecretLister

// Get is the Secret of the first watch that holds it.
func (l SecretListers) Get(namespace, name string) (*corev1.Secret, error) {
	for _, one := range l {
		if s, err := one.Secrets(namespace).Get(name); err == nil || !apierrors.IsNotFound(err) {
			return s, err
		}
	}
	return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
}

// List is the Secrets every watch holds, as one list.
func (l SecretListers) List(sel labels.Selector) ([]*corev1.Secret, error) {
	return union(l, func(one corelisters.SecretLister) ([]*corev1.Secret, error) { return one.List(sel) })
}

// union is what list gives of each watch, together.
func union[W, T any](watches []W, list func(W) ([]T, error)) ([]T, error) {
	var out []T
	for _, w := range watches {
		got, err := list(w)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// GenericListers read the objects of several watches of one kind as one lister.
type GenericListers []cache.GenericLister

// List is what every lister holds, as one list.
func (l GenericListers) List(sel labels.Selector) ([]runtime.Object, error) {
	return union(l, func(one cache.GenericLister) ([]runtime.Object, error) { return one.List(sel) })
}

// Get is the object of the first lister that holds it.
func (l GenericListers) Get(name string) (runtime.Object, error) {
	return l.first(func(one cache.GenericLister) (runtime.Object, error) { return one.Get(name) }, name)
}

// ByNamespace reads namespace through every lister, as one.
func (l GenericListers) ByNamespace(namespace string) cache.GenericNamespaceLister {
	return namespaced{l, namespace}
}

func (l GenericListers) first(get func(cache.GenericLister) (runtime.Object, error), name string) (runtime.Object, error) {
	for _, one := range l {
		if obj, err := get(one); err == nil || !apierrors.IsNotFound(err) {
			return obj, err
		}
	}
	return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
}

type namespaced struct {
	l         GenericListers
	namespace string
}

func (n namespaced) List(sel labels.Selector) ([]runtime.Object, error) {
	return union(n.l, func(one cache.GenericLister) ([]runtime.Object, error) { return one.ByNamespace(n.namespace).List(sel) })
}

func (n namespaced) Get(name string) (runtime.Object, error) {
	return n.l.first(func(one cache.GenericLister) (runtime.Object, error) { return one.ByNamespace(n.namespace).Get(name) }, name)
}

// ReadStore is what the injection reads of an informer's store.
type ReadStore interface {
	GetByKey(key string) (any, bool, error)
	List() []any
}

// Stores read several informers' Stores as one.
type Stores []cache.Store

// GetByKey is the object of the first store that holds key.
func (s Stores) GetByKey(key string) (any, bool, error) {
	for _, one := range s {
		if obj, ok, err := one.GetByKey(key); ok || err != nil {
			return obj, ok, err
		}
	}
	return nil, false, nil
}

// List is what every store holds, as one list.
func (s Stores) List() []any {
	var out []any
	for _, one := range s {
		out = append(out, one.List()...)
	}
	return out
}
