// Package grantcache keeps every namespace's grants current from two watches (the
// TrustPolicies and the namespaces' metadata), so that a check at admission, at a
// mount or at signing is a map lookup, never a request to the API server. Each
// namespace's grants are added up once after any policy or namespace changes, on
// first use.
package grantcache

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/tenancy"
)

var namespacesResource = corev1.SchemeGroupVersion.WithResource("namespaces")

// bundleWatch is one served bundle API's metadata, its objects named in its form.
type bundleWatch struct {
	cache.SharedIndexInformer
	form bundle.Form
}

// Cache answers what a namespace is granted.
type Cache struct {
	meta       metadata.Interface
	policies   cache.SharedIndexInformer
	namespaces cache.SharedIndexInformer
	// bundles are the served bundle APIs' metadata (WatchBundles), native first: what
	// a bundle asked for by name is labelled now.
	bundles []bundleWatch
	// exempt is trustsync's own namespace, never checked.
	exempt string
	dirty  atomic.Bool

	mu     sync.Mutex
	parsed []tenancy.Policy
	grants map[string]tenancy.Grants
}

// New watches the TrustPolicies and the namespaces; exempt (the release's namespace)
// is never checked.
func New(dyn dynamic.Interface, meta metadata.Interface, exempt string, resync time.Duration) (*Cache, error) {
	c := &Cache{
		meta:       meta,
		policies:   dynamicinformer.NewFilteredDynamicInformer(dyn, v1alpha1.TrustPolicyResource, metav1.NamespaceAll, resync, cache.Indexers{}, nil).Informer(),
		namespaces: metadatainformer.NewFilteredMetadataInformer(meta, namespacesResource, metav1.NamespaceAll, resync, cache.Indexers{}, nil).Informer(),
		exempt:     exempt,
		grants:     map[string]tenancy.Grants{},
	}
	c.dirty.Store(true)
	changed := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.dirty.Store(true) },
		UpdateFunc: func(any, any) { c.dirty.Store(true) },
		DeleteFunc: func(any) { c.dirty.Store(true) },
	}
	for _, i := range []cache.SharedIndexInformer{c.policies, c.namespaces} {
		if _, err := i.AddEventHandler(changed); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// WatchBundles also watches the metadata of the bundles served (called before Run),
// so that Bundle can say what a bundle asked for by name is labelled: a grant of a
// signer's bundles by label then covers it.
func (c *Cache) WatchBundles(served bundle.Served, resync time.Duration) {
	for _, api := range served.APIs() {
		c.bundles = append(c.bundles, bundleWatch{form: api.Form,
			SharedIndexInformer: metadatainformer.NewFilteredMetadataInformer(c.meta, api.GroupVersionResource(), metav1.NamespaceAll, resync, cache.Indexers{}, nil).Informer()})
	}
}

// NewForConfig is New with clients of restCfg.
func NewForConfig(restCfg *rest.Config, exempt string, resync time.Duration) (*Cache, error) {
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	return New(dyn, meta, exempt, resync)
}

// Run watches until ctx is done.
func (c *Cache) Run(ctx context.Context) {
	for _, i := range c.bundles {
		go i.RunWithContext(ctx)
	}
	go c.policies.RunWithContext(ctx)
	c.namespaces.RunWithContext(ctx)
}

// HasSynced reports whether every watch has listed.
func (c *Cache) HasSynced() bool {
	for _, i := range c.bundles {
		if !i.HasSynced() {
			return false
		}
	}
	return c.policies.HasSynced() && c.namespaces.HasSynced()
}

// Bundle is what a bundle asked for by name is (its signer, from its name as upstream
// requires, and its labels), if a watched API holds it.
func (c *Cache) Bundle(name string) (tenancy.Bundle, bool) {
	for _, i := range c.bundles {
		key := name
		if i.form == bundle.MirrorForm {
			key = bundle.MirrorName(name)
		}
		if obj, ok, _ := i.GetStore().GetByKey(key); ok {
			if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
				return tenancy.Bundle{Name: name, SignerName: bundle.SignerOfName(name), Labels: m.Labels}, true
			}
		}
	}
	return tenancy.Bundle{}, false
}

// For returns what namespace is granted; exempt is true for trustsync's own namespace,
// which is not checked. A namespace the watch has not seen yet (created a moment ago)
// is read once from the API server.
func (c *Cache) For(ctx context.Context, namespace string) (g tenancy.Grants, exempt bool, err error) {
	if namespace == c.exempt {
		return tenancy.Grants{Namespace: namespace}, true, nil
	}
	if !c.HasSynced() {
		return g, false, fmt.Errorf("the TrustPolicies and namespaces have not been listed yet; try again in a moment")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dirty.Swap(false) {
		c.parsed = c.parse()
		clear(c.grants)
	}
	if g, ok := c.grants[namespace]; ok {
		return g, false, nil
	}
	labels, err := c.labels(ctx, namespace)
	if err != nil {
		return g, false, err
	}
	g = tenancy.For(c.parsed, namespace, labels)
	c.grants[namespace] = g
	return g, false, nil
}

// Policies are the TrustPolicies as last parsed (for a status writer).
func (c *Cache) Policies() []tenancy.Policy {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dirty.Swap(false) {
		c.parsed = c.parse()
		clear(c.grants)
	}
	return c.parsed
}

// parse reads the policies as watched; one that does not decode grants nothing.
func (c *Cache) parse() []tenancy.Policy {
	return tenancy.Parse(v1alpha1.FromStore(c.policies.GetStore().List(), v1alpha1.TrustPolicyFromUnstructured))
}

func (c *Cache) labels(ctx context.Context, namespace string) (map[string]string, error) {
	if obj, ok, _ := c.namespaces.GetStore().GetByKey(namespace); ok {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			return m.Labels, nil
		}
	}
	m, err := c.meta.Resource(namespacesResource).Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read namespace %s's labels, which decide its TrustPolicies: %w", namespace, err)
	}
	return m.Labels, nil
}
