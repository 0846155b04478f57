package reader

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	corev1 "k8s.io/api/core/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/trustfiles"
)

// TrustObjects knows which ConfigMaps and Secrets trustsync writes, so that the pods
// mounting them are observed and those reading them through env are named: it learns
// them from the TrustTargets and the namespaces' labels alone (a watch of each,
// cluster-scoped and small), never from the objects, so neither the node agent nor
// the signer holds a right to list a ConfigMap or a Secret.
type TrustObjects struct {
	targets    cache.SharedIndexInformer
	namespaces cache.SharedIndexInformer
	dirty      atomic.Bool

	mu      sync.Mutex
	current trustfiles.Objects
	// parsed are the TrustTargets current was made from, with their status.
	parsed []*v1alpha1.TrustTarget
}

// NewTrustObjects watches the TrustTargets and namespaces. Where TrustTargets are not
// served (yet), the watch retries and there are no trust objects meanwhile.
func NewTrustObjects(ctx context.Context, dyn dynamic.Interface, meta metadata.Interface, resync time.Duration) (*TrustObjects, error) {
	o := &TrustObjects{
		targets:    dynamicinformer.NewFilteredDynamicInformer(dyn, v1alpha1.TrustTargetResource, metav1.NamespaceAll, resync, cache.Indexers{}, nil).Informer(),
		namespaces: metadatainformer.NewFilteredMetadataInformer(meta, corev1.SchemeGroupVersion.WithResource("namespaces"), metav1.NamespaceAll, resync, cache.Indexers{}, nil).Informer(),
	}
	o.dirty.Store(true)
	changed := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { o.dirty.Store(true) },
		UpdateFunc: func(any, any) { o.dirty.Store(true) },
		DeleteFunc: func(any) { o.dirty.Store(true) },
	}
	for _, i := range []cache.SharedIndexInformer{o.targets, o.namespaces} {
		if _, err := i.AddEventHandler(changed); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Run watches until ctx is done.
func (o *TrustObjects) Run(ctx context.Context) {
	go o.targets.RunWithContext(ctx)
	o.namespaces.RunWithContext(ctx)
}

// HasSynced reports whether both watches have listed.
func (o *TrustObjects) HasSynced() bool { return o.targets.HasSynced() && o.namespaces.HasSynced() }

// Current is what trustsync writes now, and whether it changed since the last call.
// Until both watches have listed it is nothing, and unchanged.
func (o *TrustObjects) Current() (trustfiles.Objects, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.HasSynced() || !o.dirty.Swap(false) {
		return o.current, false
	}
	var targets []*v1alpha1.TrustTarget
	for _, obj := range o.targets.GetStore().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		t, err := v1alpha1.TrustTargetFromUnstructured(u)
		if err != nil {
			klog.V(2).InfoS("Skipping a TrustTarget that does not decode", "target", u.GetName(), "err", err)
			continue
		}
		targets = append(targets, t)
	}
	var namespaces []*metav1.PartialObjectMetadata
	for _, obj := range o.namespaces.GetStore().List() {
		if ns, ok := obj.(*metav1.PartialObjectMetadata); ok {
			namespaces = append(namespaces, ns)
		}
	}
	o.current, o.parsed = trustfiles.FromTargets(targets, namespaces), targets
	return o.current, true
}

// Targets are the TrustTargets as of the last Current, with their status: what
// their objects hold.
func (o *TrustObjects) Targets() []*v1alpha1.TrustTarget {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.parsed
}
