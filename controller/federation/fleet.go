package federation

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/kubeapi/queue"
)

// ClusterProfiles are sig-multicluster's cluster inventory (KEP-4322): one per cluster
// of the fleet, its properties set by the fleet's manager.
var ClusterProfiles = schema.GroupVersionResource{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Resource: "clusterprofiles"}

// The ClusterProfile properties a fleet member's trustsync is found by. A profile with
// the first two is joined; the profile defaults to https_spiffe when a bundle is given
// (a property holds at most 1024 characters: one EC CA certificate fits), else https_web.
const (
	PropertyTrustDomain       = "trustsync.io/trust-domain"
	PropertyEndpointURL       = "trustsync.io/bundle-endpoint-url"
	PropertyEndpointProfile   = "trustsync.io/bundle-endpoint-profile"
	PropertyEndpointSPIFFEID  = "trustsync.io/bundle-endpoint-spiffe-id"
	PropertyTrustDomainBundle = "trustsync.io/trust-domain-bundle"
)

// FleetLabel marks the FederatedTrustDomains the fleet made: only they are updated
// and removed with their ClusterProfile; one a user made is never touched.
const (
	FleetLabel = "app.kubernetes.io/managed-by"
	FleetValue = "trustsync-fleet"
	// ProfileAnnotation names the ClusterProfile (namespace/name) a peer comes from.
	ProfileAnnotation = "trustsync.io/cluster-profile"
)

// clusterProfile is what is read of a ClusterProfile. The cluster-inventory-api
// module's own types are not used: its module is not served by the Go module proxy
// this project builds from, and these two fields are all the fleet needs.
type clusterProfile struct {
	metav1.ObjectMeta `json:"metadata"`
	Status            struct {
		Properties []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"properties"`
	} `json:"status"`
}

func (p *clusterProfile) property(name string) string {
	for _, prop := range p.Status.Properties {
		if prop.Name == name {
			return strings.TrimSpace(prop.Value)
		}
	}
	return ""
}

// FleetConfig is what the fleet needs.
type FleetConfig struct {
	Dynamic dynamic.Interface
	// Namespace holds the fleet's ClusterProfiles.
	Namespace string
	// OwnTrustDomains are this cluster's own: a profile naming one is this cluster.
	OwnTrustDomains []string
	Events          record.EventRecorder
	Resync          time.Duration
}

// Fleet keeps one FederatedTrustDomain per ClusterProfile that carries a trustsync
// bundle endpoint: joining the fleet is joining its trust, leaving it leaving it.
type Fleet struct {
	cfg      FleetConfig
	queue    workqueue.TypedRateLimitingInterface[string]
	profiles cache.SharedIndexInformer
	peers    cache.SharedIndexInformer
}

// NewFleet sets up the informers: the namespace's ClusterProfiles, and the
// FederatedTrustDomains the fleet made.
func NewFleet(cfg FleetConfig) *Fleet {
	f := &Fleet{cfg: cfg, queue: queue.New[string]("trustsync_fleet")}
	f.profiles = dynamicinformer.NewFilteredDynamicSharedInformerFactory(cfg.Dynamic, cfg.Resync, cfg.Namespace, nil).ForResource(ClusterProfiles).Informer()
	f.peers = dynamicinformer.NewFilteredDynamicSharedInformerFactory(cfg.Dynamic, cfg.Resync, metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.LabelSelector = labels.Set{FleetLabel: FleetValue}.String()
	}).ForResource(v1alpha1.FederatedTrustDomainResource).Informer()
	// One key: the fleet is reconciled whole, whatever changed.
	enqueue := func(any) { f.queue.Add("fleet") }
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) }, DeleteFunc: enqueue}
	_, _ = f.profiles.AddEventHandler(handler)
	_, _ = f.peers.AddEventHandler(handler)
	return f
}

// Run runs the informers and the worker until ctx is done.
func (f *Fleet) Run(ctx context.Context) {
	defer f.queue.ShutDown()
	go f.profiles.RunWithContext(ctx)
	go f.peers.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), f.profiles.HasSynced, f.peers.HasSynced) {
		return
	}
	f.queue.Add("fleet")
	queue.Work(ctx, f.queue, 1, "fleet", func(ctx context.Context, _ string) (time.Duration, error) { return 0, f.reconcile(ctx) })
	<-ctx.Done()
}

// desired is the FederatedTrustDomain a profile stands for, or why it stands for none.
func (f *Fleet) desired(p *clusterProfile) (*v1alpha1.FederatedTrustDomain, string) {
	td, url := p.property(PropertyTrustDomain), p.property(PropertyEndpointURL)
	if td == "" || url == "" {
		return nil, "" // not a trustsync member (or not yet): nothing to say
	}
	if slices.Contains(f.cfg.OwnTrustDomains, td) {
		return nil, "" // this cluster
	}
	bootstrap := p.property(PropertyTrustDomainBundle)
	prof := v1alpha1.BundleEndpointProfile{Type: p.property(PropertyEndpointProfile)}
	if prof.Type == "" {
		prof.Type = v1alpha1.ProfileWeb
		if bootstrap != "" {
			prof.Type = v1alpha1.ProfileSPIFFE
		}
	}
	if prof.Type == v1alpha1.ProfileSPIFFE {
		prof.EndpointSPIFFEID = p.property(PropertyEndpointSPIFFEID)
		if prof.EndpointSPIFFEID == "" {
			prof.EndpointSPIFFEID = v1alpha1.BundleEndpointID(td)
		}
	}
	ftd := &v1alpha1.FederatedTrustDomain{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.FederatedTrustDomainResource.GroupVersion().String(), Kind: v1alpha1.FederatedTrustDomainKind},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: map[string]string{FleetLabel: FleetValue},
			Annotations: map[string]string{ProfileAnnotation: p.Namespace + "/" + p.Name}},
		Spec: v1alpha1.FederatedTrustDomainSpec{TrustDomain: td, BundleEndpointURL: url, BundleEndpointProfile: prof, TrustDomainBundle: bootstrap},
	}
	if _, err := v1alpha1.ParseFederatedTrustDomainSpec(&ftd.Spec); err != nil {
		return nil, fmt.Sprintf("its trustsync properties cannot make a FederatedTrustDomain: %v", err)
	}
	return ftd, ""
}

// reconcile makes the fleet's FederatedTrustDomains those its profiles stand for.
func (f *Fleet) reconcile(ctx context.Context) error {
	want := map[string]*v1alpha1.FederatedTrustDomain{}
	for _, obj := range f.profiles.GetStore().List() {
		u := obj.(*unstructured.Unstructured)
		p := &clusterProfile{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
			klog.FromContext(ctx).Error(err, "Cannot read a ClusterProfile", "profile", u.GetNamespace()+"/"+u.GetName())
			continue
		}
		ftd, why := f.desired(p)
		if why != "" {
			f.cfg.Events.Event(u, corev1.EventTypeWarning, "FleetPeerNotJoined", why)
		}
		if ftd != nil {
			want[ftd.Name] = ftd
		}
	}
	resource := f.cfg.Dynamic.Resource(v1alpha1.FederatedTrustDomainResource)
	var errs []error
	have := map[string]*v1alpha1.FederatedTrustDomain{}
	for _, obj := range f.peers.GetStore().List() {
		if ftd, err := v1alpha1.FederatedTrustDomainFromUnstructured(obj.(*unstructured.Unstructured)); err == nil {
			have[ftd.Name] = ftd
		}
	}
	for _, name := range slices.Sorted(maps.Keys(have)) {
		cur := have[name]
		w, ok := want[name]
		// A peer whose profile left, or whose trust domain changed (immutable): removed,
		// with its imported bundle (which it owns).
		if !ok || w.Spec.TrustDomain != cur.Spec.TrustDomain {
			if err := resource.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID}}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
				continue
			}
			klog.FromContext(ctx).Info("Fleet member left; its FederatedTrustDomain removed", "name", name, "trustDomain", cur.Spec.TrustDomain)
			continue
		}
		if cur.Spec != w.Spec {
			if err := f.apply(ctx, w); err != nil {
				errs = append(errs, err)
			}
		}
		delete(want, name)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		w := want[name]
		if _, err := resource.Get(ctx, name, metav1.GetOptions{}); err == nil {
			// A FederatedTrustDomain of the same name the fleet did not make: a user's.
			klog.FromContext(ctx).Info("A FederatedTrustDomain the fleet did not make has this member's name; left alone", "name", name)
			continue
		}
		if err := f.apply(ctx, w); err != nil {
			errs = append(errs, err)
			continue
		}
		klog.FromContext(ctx).Info("Fleet member joined", "name", name, "trustDomain", w.Spec.TrustDomain, "endpoint", w.Spec.BundleEndpointURL)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d fleet changes failed, first: %w", len(errs), errs[0])
	}
	return nil
}

func (f *Fleet) apply(ctx context.Context, ftd *v1alpha1.FederatedTrustDomain) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ftd)
	if err != nil {
		return err
	}
	delete(m, "status")
	_, err = f.cfg.Dynamic.Resource(v1alpha1.FederatedTrustDomainResource).Apply(ctx, ftd.Name, &unstructured.Unstructured{Object: m}, metav1.ApplyOptions{FieldManager: FieldManager + "-fleet", Force: true})
	return err
}
