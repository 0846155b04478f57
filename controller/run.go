package controller

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/controller/federation"
	"github.com/trustsync/trustsync/controller/inject"
	"github.com/trustsync/trustsync/controller/objects"
	"github.com/trustsync/trustsync/controller/policystatus"
	"github.com/trustsync/trustsync/controller/sidecarevents"
	"github.com/trustsync/trustsync/controller/targets"
	"github.com/trustsync/trustsync/delivery/watch"
	"github.com/trustsync/trustsync/kubeapi"
	"github.com/trustsync/trustsync/kubeapi/healthserver"
	"github.com/trustsync/trustsync/tenancy/grantcache"
	"github.com/trustsync/trustsync/trustreport/reader"
)

// resync re-checks every object now and then even without an event, as a safety net.
const resync = 10 * time.Minute

// Campaign stands for a Lease until ctx ends or a held Lease is lost, running lead
// while it holds it.
type Campaign = func(ctx context.Context, cfg *rest.Config, namespace, name string, lead func(context.Context)) error

// Run runs the controllers until ctx is done; with a campaign, only while it holds
// the Lease, and it exits when it loses it so a restart starts clean.
func Run(ctx context.Context, o *Options, campaign Campaign) error {
	if err := o.Validate(); err != nil {
		return err
	}
	cfg, err := kubeapi.RESTConfig(o.Flags, "trustsync-controller")
	if err != nil {
		return err
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := NewMetrics(registry)
	var ready atomic.Bool
	if err := healthserver.Serve(ctx, o.HealthAddress, registry, kubeapi.Unless(ready.Load, "not leading, or caches not synced")); err != nil {
		return err
	}
	act := func(ctx context.Context) {
		m.leader.Set(1)
		defer m.leader.Set(0)
		if err := run(ctx, o, cfg, m, &ready); err != nil {
			klog.ErrorS(err, "Controllers stopped")
		}
	}
	if campaign == nil {
		act(ctx)
		return nil
	}
	if err := campaign(ctx, cfg, o.Namespace, LeaseName, act); err != nil {
		return fmt.Errorf("%w; exiting so a restart starts clean", err)
	}
	return nil
}

// Metrics are what trustsync-controller exports.
type Metrics struct {
	targets    *objects.Metrics
	federation *federation.Metrics
	// leader is 1 while this replica holds the Lease.
	leader prometheus.Gauge
}

// NewMetrics registers what trustsync-controller exports: the controllers' metrics,
// and whether this replica leads.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	leader := prometheus.NewGauge(prometheus.GaugeOpts{Name: "trustsync_controller_leader", Help: "1 while this replica holds the controllers' Lease."})
	reg.MustRegister(leader)
	return &Metrics{targets: objects.NewMetrics(reg), federation: federation.NewMetrics(reg), leader: leader}
}

// serves says whether the API server serves resource, waiting out an outage: an
// unanswered discovery is not "not served", which would leave a controller off until
// the next restart.
func serves(ctx context.Context, lister kubeapi.ResourceLister, resource schema.GroupVersionResource) (bool, error) {
	var ok bool
	err := kubeapi.Retry(ctx, time.Second, 30*time.Second, func(context.Context) (bool, error) {
		var err error
		if ok, err = kubeapi.Serves(lister, resource); err != nil {
			klog.ErrorS(err, "Cannot tell yet whether a resource is served; retrying", "resource", resource.String())
			return false, nil
		}
		return true, nil
	})
	return ok, err
}

// runFederation starts the FederatedTrustDomain controller where its CRD is served,
// writing imported bundles to every bundle API served.
func runFederation(ctx context.Context, o *Options, client kubernetes.Interface, dyn dynamic.Interface, meta metadata.Interface, recorder record.EventRecorder, m *federation.Metrics) (bool, error) {
	ok, err := serves(ctx, client.Discovery(), v1alpha1.FederatedTrustDomainResource)
	if err != nil {
		return false, err
	}
	if !ok {
		klog.InfoS("FederatedTrustDomains are not served (install the chart's CRDs); importing no peer", "resource", v1alpha1.FederatedTrustDomainResource.String())
		return false, nil
	}
	served, err := bundleapi.Discover(client.Discovery())
	if err != nil {
		return false, err
	}
	var stores []*bundleapi.Store
	for _, api := range served.APIs() {
		stores = append(stores, bundleapi.NewStore(dyn, api))
	}
	if len(stores) == 0 {
		klog.InfoS("No ClusterTrustBundle API is served (neither the native one nor trustsync's mirror CRD); importing no peer")
		return false, nil
	}
	index, _ := v1alpha1.ParseInjectedIndexRef(o.InjectedIndex) // checked by Validate
	cluster := &reader.Reader{Client: client, Dynamic: dyn, Metadata: meta, Index: index, Resync: resync}
	holding := &federation.ReportsHolding{Reader: cluster, MaxAge: 30 * time.Second, Clock: clock.RealClock{}}
	c := federation.New(federation.Config{Dynamic: dyn, Stores: stores, Events: recorder, Fetcher: &federation.HTTPFetcher{},
		Metrics: m, Holding: holding.Holding, Resync: resync})
	go c.Run(ctx, 4)
	if o.FleetNamespace != "" {
		ok, err = serves(ctx, client.Discovery(), federation.ClusterProfiles)
		if err != nil {
			return false, err
		}
		if !ok {
			klog.InfoS("ClusterProfiles are not served (install the cluster inventory API's CRD); no fleet to join", "resource", federation.ClusterProfiles.String(), "namespace", o.FleetNamespace)
		} else {
			go federation.NewFleet(federation.FleetConfig{Dynamic: dyn, Namespace: o.FleetNamespace, OwnTrustDomains: o.OwnTrustDomains, Events: recorder, Resync: resync}).Run(ctx)
			klog.InfoS("Joining the fleet's trust", "clusterProfiles", o.FleetNamespace, "ownTrustDomains", o.OwnTrustDomains)
		}
	}
	return true, nil
}

// runPolicies keeps the TrustPolicies' statuses, from the watches enforcement reads
// too (nil where the TrustPolicy CRD is not served).
func runPolicies(ctx context.Context, o *Options, client kubernetes.Interface, dyn dynamic.Interface, meta metadata.Interface, served bundle.Served, recorder record.EventRecorder) (*grantcache.Cache, error) {
	ok, err := serves(ctx, client.Discovery(), v1alpha1.TrustPolicyResource)
	if err != nil {
		return nil, err
	}
	if !ok {
		if o.TenancyEnforced {
			return nil, fmt.Errorf("--tenancy-enforced, but TrustPolicies (%s) are not served: install the chart's CRDs", v1alpha1.TrustPolicyResource)
		}
		klog.InfoS("TrustPolicies are not served (install the chart's CRDs); writing no policy status", "resource", v1alpha1.TrustPolicyResource.String())
		return nil, nil
	}
	grants, err := grantcache.New(dyn, meta, o.Namespace, resync)
	if err != nil {
		return nil, err
	}
	if err := grants.WatchBundles(served, resync); err != nil {
		return nil, err
	}
	statuses := policystatus.New(grants, dyn, recorder)
	go grants.Run(ctx)
	go statuses.Run(ctx)
	klog.InfoS("Writing TrustPolicy statuses", "enforced", o.TenancyEnforced, "exempt", o.Namespace)
	return grants, nil
}

// run starts the injection into annotated objects, and the TrustTarget controller
// where its CRD is served, and waits for ctx.
func run(ctx context.Context, o *Options, cfg *rest.Config, m *Metrics, ready *atomic.Bool) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// Events on the TrustTargets (in "default", as for every cluster-scoped object)
	// and the annotated objects: the sink writes each into its object's namespace.
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "trustsync-controller"})

	registry := watch.New(ctx, dyn, client.Discovery())
	served, err := registry.Discover(ctx)
	if err != nil {
		return err
	}
	go registry.Run(ctx, 5*time.Minute)
	grants, err := runPolicies(ctx, o, client, dyn, meta, served, recorder)
	if err != nil {
		return err
	}
	var tenancy objects.Tenancy
	if grants != nil && o.TenancyEnforced {
		// Nothing is written before the grants are known: a write from none would
		// take away what every tenant was granted.
		if !cache.WaitForCacheSync(ctx.Done(), grants.HasSynced) {
			return nil
		}
		tenancy = objects.Tenancy{Grants: grants.For, Bundles: grants.Bundle}
	}
	// One metadata-only watch of every ConfigMap (and of every Secret, or of each
	// Secret name allowed) serves both: the injection finds the objects that ask, the
	// targets whether an object exists.
	objectMeta := objects.NewObjectMeta(meta, resync, o.SecretNames)
	index, _ := v1alpha1.ParseInjectedIndexRef(o.InjectedIndex) // checked by Validate
	in := inject.NewFiller(inject.FillConfig{Client: client, Dynamic: dyn, Metadata: meta, Registry: registry, Events: recorder,
		Secrets: o.Secrets, SecretNames: o.SecretNames, CABundles: o.CABundles, Resync: resync, Metrics: m.targets, ObjectMeta: objectMeta, Index: index, Tenancy: tenancy})
	if tenancy.Grants != nil {
		grants.OnGrantsChange(in.EnqueueAll)
	}
	go in.Run(ctx, 2)
	if o.Targets {
		ok, err := serves(ctx, client.Discovery(), v1alpha1.TrustTargetResource)
		if err != nil {
			return err
		}
		if !ok {
			klog.InfoS("TrustTargets are not served (install the chart's CRDs); filling annotated objects alone", "resource", v1alpha1.TrustTargetResource.String())
		} else {
			c := targets.New(targets.Config{Client: client, Dynamic: dyn, Registry: registry, Events: recorder, Secrets: o.Secrets, SecretNames: o.SecretNames, Metadata: meta,
				Resync: resync, Metrics: m.targets, ObjectMeta: objectMeta, Tenancy: tenancy})
			if tenancy.Grants != nil {
				grants.OnGrantsChange(c.EnqueueAll)
			}
			go c.Run(ctx, 2)
		}
	}
	if o.SidecarEventsClusterRole != "" {
		namespaces := informers.NewSharedInformerFactory(client, resync)
		binder := sidecarevents.New(client, namespaces, o.SidecarEventsClusterRole, o.Namespace)
		namespaces.Start(ctx.Done())
		go binder.Run(ctx)
	}
	federating := false
	if o.Federation {
		if federating, err = runFederation(ctx, o, client, dyn, meta, recorder, m.federation); err != nil {
			return err
		}
	}
	ready.Store(true)
	defer ready.Store(false)
	klog.InfoS("Controllers running", "tenancyEnforced", tenancy.Grants != nil, "targets", o.Targets, "secrets", o.Secrets, "secretNames", o.SecretNames, "caBundles", o.CABundles, "federation", federating, "sidecarEventsClusterRole", o.SidecarEventsClusterRole)
	<-ctx.Done()
	return nil
}
