// Package grantcache keeps every namespace's grants current from watches of the
// TrustPolicies and the namespaces' metadata (and, where asked, the bundles' names,
// signers and labels), so that a check at admission, at a mount, at a write or at
// signing is a map lookup, never a request to the API server. Each namespace's grants
// are added up once after any policy or namespace changes, on first use.
package grantcache

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// bundleWatch is one served bundle API's watch, its objects named in its form.
type bundleWatch struct {
	cache.SharedIndexInformer
	form bundle.Form
}

// Cache answers what a namespace is granted.
type Cache struct {
	dyn        dynamic.Interface
	meta       metadata.Interface
	policies   cache.SharedIndexInformer
	namespaces cache.SharedIndexInformer
	// bundles are the served bundle APIs (WatchBundles), native first, each bundle
	// kept as its name, signer and labels: what a bundle asked for by name is now.
	bundles []bundleWatch
	// exempt is trustsync's own namespace, never checked.
	exempt string
	dirty  atomic.Bool

	mu sync.Mutex
	// listeners are told of every change; grantListeners of the grants' alone.
	listeners, grantListeners []func()
	parsed                    []tenancy.Policy
	grants                    map[string]tenancy.Grants
}

// New watches the TrustPolicies and the namespaces; exempt (the release's namespace)
// is never checked.
func New(dyn dynamic.Interface, meta metadata.Interface, exempt string, resync time.Duration) (*Cache, error) {
	c := &Cache{
		dyn:        dyn,
		meta:       meta,
		policies:   dynamicinformer.NewFilteredDynamicInformer(dyn, v1alpha1.TrustPolicyResource, metav1.NamespaceAll, resync, cache.Indexers{}, nil).Informer(),
		namespaces: metadatainformer.NewFilteredMetadataInformer(meta, namespacesResource, metav1.NamespaceAll, resync, cache.Indexers{}, nil).Informer(),
		exempt:     exempt,
		grants:     map[string]tenancy.Grants{},
	}
	c.dirty.Store(true)
	for _, i := range []cache.SharedIndexInformer{c.policies, c.namespaces} {
		if _, err := i.AddEventHandler(c.handler(true)); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// WatchBundles also watches the bundles served (called before Run), keeping of each
// its name, signer and labels alone (their certificates are dropped as they arrive),
// so that Bundle can say what a bundle asked for by name is: a grant of a signer's
// bundles by label then covers it.
func (c *Cache) WatchBundles(served bundle.Served, resync time.Duration) error {
	for _, api := range served.APIs() {
		i := dynamicinformer.NewFilteredDynamicInformer(c.dyn, api.GroupVersionResource(), metav1.NamespaceAll, resync, cache.Indexers{}, nil).Informer()
		if err := i.SetTransform(bundleIdentity); err != nil {
			return err
		}
		if _, err := i.AddEventHandler(c.handler(false)); err != nil {
			return err
		}
		c.bundles = append(c.bundles, bundleWatch{form: api.Form, SharedIndexInformer: i})
	}
	return nil
}

// bundleIdentity keeps of a bundle what a grant looks at: its name, signer and labels.
func bundleIdentity(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a tombstone: its key is all that is used
	}
	kept := &unstructured.Unstructured{Object: map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind()}}
	kept.SetName(u.GetName())
	kept.SetLabels(u.GetLabels())
	kept.SetResourceVersion(u.GetResourceVersion())
	if signer, _, _ := unstructured.NestedString(u.Object, "spec", "signerName"); signer != "" {
		_ = unstructured.SetNestedField(kept.Object, signer, "spec", "signerName")
	}
	return kept, nil
}

// Bundle is what a bundle asked for by name (upstream form) is, if a watched API
// holds it.
func (c *Cache) Bundle(name string) (tenancy.Bundle, bool) {
	for _, i := range c.bundles {
		key := name
		if i.form == bundle.MirrorForm {
			key = bundle.MirrorName(name)
		}
		if obj, ok, _ := i.GetStore().GetByKey(key); ok {
			if b, ok := bundleOf(obj, i.form); ok {
				return b, true
			}
		}
	}
	return tenancy.Bundle{}, false
}

// Bundles are every bundle watched, named in upstream form.
func (c *Cache) Bundles() []tenancy.Bundle {
	var out []tenancy.Bundle
	for _, i := range c.bundles {
		for _, obj := range i.GetStore().List() {
			if b, ok := bundleOf(obj, i.form); ok {
				out = append(out, b)
			}
		}
	}
	return out
}

func bundleOf(obj any, form bundle.Form) (tenancy.Bundle, bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return tenancy.Bundle{}, false
	}
	signer, _, _ := unstructured.NestedString(u.Object, "spec", "signerName")
	name := u.GetName()
	if form == bundle.MirrorForm {
		name = bundle.UpstreamName(name, signer)
	}
	return tenancy.Bundle{Name: name, SignerName: signer, Labels: u.GetLabels()}, true
}

// NamespaceLabels are every namespace's labels, as watched.
func (c *Cache) NamespaceLabels() []map[string]string {
	var out []map[string]string
	for _, obj := range c.namespaces.GetStore().List() {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			out = append(out, m.Labels)
		}
	}
	return out
}

// PolicyObjects are the TrustPolicies as watched, for a status writer.
func (c *Cache) PolicyObjects() []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, obj := range c.policies.GetStore().List() {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	return out
}

// OnChange calls f after any TrustPolicy, namespace or bundle changes: a policy's
// status may have changed. f must not block.
func (c *Cache) OnChange(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listeners = append(c.listeners, f)
}

// OnGrantsChange calls f after a TrustPolicy or a namespace changes: whoever acts on
// grants looks again. f must not block.
func (c *Cache) OnGrantsChange(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.grantListeners = append(c.grantListeners, f)
}

// handler tells the listeners of a change; grants says it may change grants, which
// must then be added up again.
func (c *Cache) handler(grants bool) cache.ResourceEventHandlerFuncs {
	changed := func() {
		c.mu.Lock()
		listeners := slices.Clone(c.listeners)
		if grants {
			c.dirty.Store(true)
			listeners = append(listeners, c.grantListeners...)
		}
		c.mu.Unlock()
		for _, f := range listeners {
			f()
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
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
