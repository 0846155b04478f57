// Package bundleapi is trustsync's access to trust bundles: the kind-neutral store,
// discovery and list-watch over the native API and the mirror CRD alike.
package bundleapi

import (
	"context"
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/trustsync/trustsync/bundle"
)

// Store reads and writes bundles of one API. Every bundle it returns or takes is a
// certificates.k8s.io/v1 ClusterTrustBundle named in upstream form, whichever API
// serves it: the native versions and the mirror share one spec, and only the name
// form differs, so callers never see the difference.
type Store struct {
	api    bundle.API
	client dynamic.ResourceInterface
	// of is the client the store came from, which says whether it can stream lists.
	of dynamic.Interface
}

// NewStore returns a Store for api through client. The dynamic client decodes only the
// objects it is given, which keeps a reader's memory small: it does not pull in the
// typed clientset's scheme of every group.
func NewStore(client dynamic.Interface, api bundle.API) *Store {
	return &Store{api: api, client: client.Resource(api.GroupVersionResource()), of: client}
}

// API returns the API this store reads and writes.
func (s *Store) API() bundle.API { return s.api }

// Get returns the bundle with the given upstream-form name.
func (s *Store) Get(ctx context.Context, name string) (*certificatesv1.ClusterTrustBundle, error) {
	u, err := s.client.Get(ctx, s.objectName(name), metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return s.fromUnstructured(u)
}

// List returns the bundles opts selects. Name field selectors must already be in this
// API's form; Selector.ListOptions builds them so.
func (s *Store) List(ctx context.Context, opts metav1.ListOptions) (*certificatesv1.ClusterTrustBundleList, error) {
	ul, err := s.client.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := &certificatesv1.ClusterTrustBundleList{ListMeta: metav1.ListMeta{ResourceVersion: ul.GetResourceVersion(), Continue: ul.GetContinue()}}
	out.Items = make([]certificatesv1.ClusterTrustBundle, 0, len(ul.Items))
	for i := range ul.Items {
		b, err := s.fromUnstructured(&ul.Items[i])
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, *b)
	}
	return out, nil
}

// Watch watches the bundles opts selects; events carry converted bundles, so the
// result feeds a client-go informer for *certificatesv1.ClusterTrustBundle directly.
func (s *Store) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := s.client.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(in watch.Event) (watch.Event, bool) {
		u, ok := in.Object.(*unstructured.Unstructured)
		if !ok {
			// Errors arrive as *metav1.Status and bookmarks keep their type; pass them on.
			return in, true
		}
		b, err := s.fromUnstructured(u)
		if err != nil {
			return watch.Event{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}}, true
		}
		in.Object = b
		return in, true
	}), nil
}

// Create creates b, named in upstream form, and returns what the server stored.
func (s *Store) Create(ctx context.Context, b *certificatesv1.ClusterTrustBundle, opts metav1.CreateOptions) (*certificatesv1.ClusterTrustBundle, error) {
	u, err := s.toUnstructured(b)
	if err != nil {
		return nil, err
	}
	u, err = s.client.Create(ctx, u, opts)
	if err != nil {
		return nil, err
	}
	return s.fromUnstructured(u)
}

// Update replaces b (its resourceVersion guards against lost updates).
func (s *Store) Update(ctx context.Context, b *certificatesv1.ClusterTrustBundle, opts metav1.UpdateOptions) (*certificatesv1.ClusterTrustBundle, error) {
	u, err := s.toUnstructured(b)
	if err != nil {
		return nil, err
	}
	u, err = s.client.Update(ctx, u, opts)
	if err != nil {
		return nil, err
	}
	return s.fromUnstructured(u)
}

// Apply makes the fields b sets hold its values, owned by fieldManager, with
// server-side apply: what other managers own (their labels, annotations) stays as it
// is, where a read-modify-write would put back whatever it read. A conflict over the
// fields b sets is settled in fieldManager's favour: it is the authority on them.
func (s *Store) Apply(ctx context.Context, b *certificatesv1.ClusterTrustBundle, fieldManager string) (*certificatesv1.ClusterTrustBundle, error) {
	u, err := s.toUnstructured(b)
	if err != nil {
		return nil, err
	}
	// An applied configuration names only what it owns; the typed encoder's empty
	// timestamp would claim a field.
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	u, err = s.client.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if err != nil {
		return nil, err
	}
	return s.fromUnstructured(u)
}

// Delete deletes the bundle with the given upstream-form name.
func (s *Store) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return s.client.Delete(ctx, s.objectName(name), opts)
}

// objectName maps an upstream-form name to this API's form.
func (s *Store) objectName(name string) string {
	if s.api.Form == bundle.MirrorForm {
		return bundle.MirrorName(name)
	}
	return name
}

func (s *Store) fromUnstructured(u *unstructured.Unstructured) (*certificatesv1.ClusterTrustBundle, error) {
	b := &certificatesv1.ClusterTrustBundle{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b); err != nil {
		return nil, fmt.Errorf("failed to decode %s %q: %w", s.api, u.GetName(), err)
	}
	if s.api.Form == bundle.MirrorForm {
		b.Name = bundle.UpstreamName(b.Name, b.Spec.SignerName)
	}
	b.TypeMeta = metav1.TypeMeta{}
	return b, nil
}

func (s *Store) toUnstructured(b *certificatesv1.ClusterTrustBundle) (*unstructured.Unstructured, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
	if err != nil {
		return nil, fmt.Errorf("failed to encode ClusterTrustBundle %q for %s: %w", b.Name, s.api, err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(s.api.GroupVersion.String())
	u.SetKind("ClusterTrustBundle")
	u.SetName(s.objectName(b.Name))
	return u, nil
}

// ListWatch lists and watches the bundles selected narrows to, for a client-go
// informer of *certificatesv1.ClusterTrustBundle. Its field and label selectors replace
// the informer's own, so a reader receives only what it asked for.
func (s *Store) ListWatch(selected metav1.ListOptions) cache.ListerWatcher {
	return s.ListWatchReporting(selected, nil)
}

// ListWatchReporting is ListWatch, also handing every list or watch error to onError
// (when not nil): a watcher learns from a 404 that its API is no longer served.
func (s *Store) ListWatchReporting(selected metav1.ListOptions, onError func(error)) cache.ListerWatcher {
	narrow := func(opts metav1.ListOptions) metav1.ListOptions {
		opts.FieldSelector, opts.LabelSelector = selected.FieldSelector, selected.LabelSelector
		return opts
	}
	report := func(err error) {
		if err != nil && onError != nil {
			onError(err)
		}
	}
	// As generated informers do: a client that cannot stream the initial list (a fake)
	// says so, and the reflector lists instead of waiting for a bookmark.
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := s.List(ctx, narrow(opts))
			report(err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := s.Watch(ctx, narrow(opts))
			report(err)
			return w, err
		},
	}, s.of)
}
