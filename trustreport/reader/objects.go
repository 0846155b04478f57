package reader

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
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
// them from the TrustTargets and the namespaces' labels (a watch of each,
// cluster-scoped and small) and from the controller's injected index (a watch of one
// ConfigMap, by name), never from the objects, so neither the node agent nor the
// signer holds a right to list a ConfigMap or a Secret.
type TrustObjects struct {
	targets    cache.SharedIndexInformer
	namespaces cache.SharedIndexInformer
	index      cache.SharedIndexInformer // nil: no index read
	indexRef   types.NamespacedName
	dirty      atomic.Bool

	mu      sync.Mutex
	current trustfiles.Objects
	// parsed are the TrustTargets current was made from, with their status.
	parsed []*v1alpha1.TrustTarget
	// injected is the index current was made from.
	injected *v1alpha1.InjectedIndex
}

// TrustObjectsConfig is what TrustObjects watches through.
type TrustObjectsConfig struct {
	Dynamic  dynamic.Interface
	Metadata metadata.Interface
	// Core (a REST client of the core group) and Index: the controller's injected
	// index, read where Index names one.
	Core   cache.Getter
	Index  types.NamespacedName
	Resync time.Duration
}

// NewTrustObjects watches the TrustTargets, the namespaces and the injected index.
// Where TrustTargets are not served (yet), the watch retries and there are no
// targets' objects meanwhile.
func NewTrustObjects(cfg TrustObjectsConfig) (*TrustObjects, error) {
	o := &TrustObjects{
		targets:    dynamicinformer.NewFilteredDynamicInformer(cfg.Dynamic, v1alpha1.TrustTargetResource, metav1.NamespaceAll, cfg.Resync, cache.Indexers{}, nil).Informer(),
		namespaces: metadatainformer.NewFilteredMetadataInformer(cfg.Metadata, corev1.SchemeGroupVersion.WithResource("namespaces"), metav1.NamespaceAll, cfg.Resync, cache.Indexers{}, nil).Informer(),
		indexRef:   cfg.Index,
	}
	informers := []cache.SharedIndexInformer{o.targets, o.namespaces}
	if cfg.Index.Name != "" {
		// One ConfigMap by name: what RBAC's resourceNames grants, and no other.
		lw := cache.NewListWatchFromClient(cfg.Core, "configmaps", cfg.Index.Namespace, fields.OneTermEqualSelector("metadata.name", cfg.Index.Name))
		o.index = cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, cfg.Resync, cache.Indexers{})
		informers = append(informers, o.index)
	}
	o.dirty.Store(true)
	changed := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { o.dirty.Store(true) },
		UpdateFunc: func(any, any) { o.dirty.Store(true) },
		DeleteFunc: func(any) { o.dirty.Store(true) },
	}
	for _, i := range informers {
		if _, err := i.AddEventHandler(changed); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Run watches until ctx is done.
func (o *TrustObjects) Run(ctx context.Context) {
	go o.targets.RunWithContext(ctx)
	if o.index != nil {
		go o.index.RunWithContext(ctx)
	}
	o.namespaces.RunWithContext(ctx)
}

// HasSynced reports whether every watch has listed.
func (o *TrustObjects) HasSynced() bool {
	return o.targets.HasSynced() && o.namespaces.HasSynced() && (o.index == nil || o.index.HasSynced())
}

// Current is what trustsync writes now, and whether it changed since the last call.
// Until both watches have listed it is nothing, and unchanged.
func (o *TrustObjects) Current() (trustfiles.Objects, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.HasSynced() || !o.dirty.Swap(false) {
		return o.current, false
	}
	targets := v1alpha1.FromStore(o.targets.GetStore().List(), v1alpha1.TrustTargetFromUnstructured)
	var namespaces []*metav1.PartialObjectMetadata
	for _, obj := range o.namespaces.GetStore().List() {
		if ns, ok := obj.(*metav1.PartialObjectMetadata); ok {
			namespaces = append(namespaces, ns)
		}
	}
	o.current, o.parsed = trustfiles.FromTargets(targets, namespaces), targets
	o.injected = o.readIndex()
	o.current.AddInjected(o.injected)
	return o.current, true
}

// readIndex is the injected index as watched: nil where none is read or the
// controller has not written it yet; an index naming why where it does not read (its
// objects' readers are then not observed, and a rotation waits its floor).
func (o *TrustObjects) readIndex() *v1alpha1.InjectedIndex {
	if o.index == nil {
		return nil
	}
	obj, ok, _ := o.index.GetStore().GetByKey(o.indexRef.String())
	if !ok {
		return nil
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Data[v1alpha1.InjectedIndexKey] == "" {
		return nil // not written yet (the chart creates it empty)
	}
	idx, err := v1alpha1.ParseInjectedIndex(cm.Data[v1alpha1.InjectedIndexKey])
	if err != nil {
		idx = &v1alpha1.InjectedIndex{Unreadable: err.Error()}
	}
	if idx.Unreadable != "" {
		klog.InfoS("The injected index does not read in full; what it leaves out is not observed until it does", "configMap", o.indexRef, "why", idx.Unreadable)
	}
	return idx
}

// Injected is the injected index as of the last Current (nil: none read).
func (o *TrustObjects) Injected() *v1alpha1.InjectedIndex {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.injected
}

// Targets are the TrustTargets as of the last Current, with their status: what
// their objects hold.
func (o *TrustObjects) Targets() []*v1alpha1.TrustTarget {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.parsed
}
