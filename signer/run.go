// Package signer is trustsync's in-cluster signer: it approves CSRs its policy allows,
// signs approved ones honouring the requested duration within its limits, and
// publishes its CA as a trust bundle, rotating it trust-before-use.
package signer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/kubeapi"
	"github.com/trustsync/trustsync/kubeapi/healthserver"
	"github.com/trustsync/trustsync/kubeapi/queue"
	"github.com/trustsync/trustsync/policy"
	"github.com/trustsync/trustsync/signer/keeper"
	"github.com/trustsync/trustsync/tenancy"
	"github.com/trustsync/trustsync/tenancy/grantcache"
	"github.com/trustsync/trustsync/trustreport/reader"
)

// resync re-checks every CA now and then even without an event, as a safety net.
const resync = 10 * time.Minute

// Campaign stands for a Lease until ctx ends or a held Lease is lost, running lead
// while it holds it (cmd/internal/lease builds it from the leader-election flags).
type Campaign = func(ctx context.Context, cfg *rest.Config, namespace, name string, lead func(context.Context)) error

// Run runs the signer until ctx is done. With a campaign, it acts only while it holds
// the Lease, and exits when it loses it so a restart starts clean; a nil campaign acts
// at once.
func Run(ctx context.Context, o *Options, fs *pflag.FlagSet, campaign Campaign) error {
	if err := Moved(fs); err != nil {
		return err
	}
	pol, err := o.Policy(fs)
	if err != nil {
		return err
	}
	pol.LogWarnings(o.PolicyFile)
	if err := o.Validate(); err != nil {
		return err
	}
	restCfg, err := kubeapi.RESTConfig(o.Flags, "trustsync-signer")
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	metaClient, err := metadata.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := NewMetrics(registry)
	keys, closeKeepers, err := openKeepers(ctx, pol, m)
	if err != nil {
		return err
	}
	defer closeKeepers()
	var ready atomic.Bool
	// /readyz: it leads and its caches are synced; a standby replica is not ready,
	// which is what a Service wants.
	if err := healthserver.Serve(ctx, o.HealthAddress, registry, kubeapi.Unless(ready.Load, "not leading, or caches not synced")); err != nil {
		return err
	}

	// The bundle endpoint runs on every replica, leading or not: it serves what the CA
	// Secrets say, the same on each.
	if o.BundleEndpointAddress != "" {
		trustDomains, secretNames := map[string]spiffeid.TrustDomain{}, map[string]string{}
		for _, s := range pol.Signers {
			trustDomains[s.SignerName], secretNames[s.SignerName] = s.Domain, secretName(o.CASecretPrefix, s.SignerName)
		}
		endpoint, err := newBundleEndpoint(pol.SignerNames(), trustDomains, secretNames, keys, o.BundleEndpointRefreshHint)
		if err != nil {
			return err
		}
		endpoint.watch(ctx, client, o.Namespace)
		if err := endpoint.serve(ctx, o.BundleEndpointAddress, endpointLimits{maxConns: o.BundleEndpointMaxConnections, maxClientConns: o.BundleEndpointMaxClientConnections, idle: o.BundleEndpointIdleTimeout}); err != nil {
			return err
		}
	}

	act := func(ctx context.Context) {
		m.leader.Set(1)
		defer m.leader.Set(0)
		if err := runControllers(ctx, o, pol, keys, client, dyn, metaClient, m, &ready); err != nil {
			klog.ErrorS(err, "Signer stopped")
		}
	}
	if campaign == nil {
		act(ctx)
		return nil
	}
	if err := campaign(ctx, restCfg, o.Namespace, LeaseName, act); err != nil {
		return fmt.Errorf("%w; exiting so a restart starts clean", err)
	}
	return nil
}

// runControllers runs the CA managers and the CSR workers until ctx is done.
func runControllers(ctx context.Context, o *Options, pol *policy.Policy, keys map[string]caKeys, client kubernetes.Interface, dyn dynamic.Interface, metaClient metadata.Interface, m *Metrics, ready *atomic.Bool) error {
	served, err := bundleapi.Discover(client.Discovery())
	if err != nil {
		return err
	}
	writers := served.APIs()
	if len(writers) == 0 {
		return fmt.Errorf("neither the native ClusterTrustBundle API nor trustsync's mirror CRD is served; install the CRD (charts/trustsync/files/crds, or the chart with crds.enabled)")
	}
	caQueue := queue.New[string]("trustsync_signer_ca")
	csrQueue := queue.New[csrKey]("trustsync_signer_csr")
	defer caQueue.ShutDown()
	defer csrQueue.ShutDown()

	h := &csrHandler{client: client, signers: map[string]*signerRuntime{}, clock: clock.RealClock{}, metrics: m, seen: newSeenAt[csrKey](clock.RealClock{}, m.waiting.WithLabelValues(kindCSR))}
	pcrQueue := queue.New[pcrKey]("trustsync_signer_pcr")
	defer pcrQueue.ShutDown()
	pcrs := &pcrHandler{client: client, signers: map[string]*pcrSigner{}, clock: clock.RealClock{}, metrics: m, refreshAt: spreadRefresh, seen: newSeenAt[pcrKey](clock.RealClock{}, m.waiting.WithLabelValues(kindPCR))}
	pcrVersion, err := podCertificateRequestVersion(client)
	if err != nil {
		return err
	}
	// Events on the CA Secrets (a rotation's progress), in the signer's namespace.
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "trustsync-signer"})
	h.events, pcrs.events = recorder, recorder

	var synced []cache.InformerSynced
	var grants tenancy.Lookup
	if o.TenancyEnforced {
		gc, err := grantcache.New(dyn, metaClient, o.Namespace, resync)
		if err != nil {
			return err
		}
		go gc.Run(ctx)
		synced = append(synced, gc.HasSynced)
		grants = gc.For
		h.grants, pcrs.grants = grants, grants
		klog.InfoS("Enforcing TrustPolicies on certificate requests and rotations", "exempt", o.Namespace)
	}
	managers := map[string]*caManager{}
	// One reader of pods, reports and trust objects for every signer's rotation gate,
	// watching from the first rotation that waits on.
	index, _ := v1alpha1.ParseInjectedIndexRef(o.InjectedIndex) // checked by Validate
	cluster := &reader.Reader{Client: client, Dynamic: dyn, Metadata: metaClient, Index: index, Resync: resync}
	for i := range pol.Signers {
		rules := &pol.Signers[i]
		name := rules.SignerName
		var csrLister certlisters.CertificateSigningRequestLister
		mgr := &caManager{
			signer: name, namespace: o.Namespace, secretName: secretName(o.CASecretPrefix, name), validity: o.CAValidity,
			rotation: rotation{RotateAt: o.CARotateAt, Window: o.CAPropagationWindow, Validity: o.CAValidity, MaxLeafLifetime: time.Duration(rules.MaxExpirationSeconds) * time.Second,
				Propagation: Propagation(o.CAPropagation), MaxWait: o.CAPropagationMaxWait, MinWait: o.PeerWait(), Floor: min(o.CAPropagationMinWait, o.CAPropagationMaxWait)},
			client: client, clock: clock.RealClock{}, metrics: m,
			publisher: &publisher{signer: name}, events: recorder, keys: keys[name],
		}
		mgr.gate = &reportsGate{reader: cluster, runCtx: ctx, publisher: mgr.publisher, grants: grants}
		for _, api := range writers {
			mgr.publisher.stores = append(mgr.publisher.stores, bundleapi.NewStore(dyn, api))
		}
		managers[name] = mgr

		// Its CA Secret only, by name on the server: the Role may read just these
		// Secrets (RBAC allows list and watch of named objects given a metadata.name
		// field selector), never the webhook's TLS key beside them.
		secretInformers := informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithNamespace(o.Namespace), informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", mgr.secretName).String()
		}))
		secrets := secretInformers.Core().V1().Secrets()
		mgr.secrets = secrets.Lister()
		enqueueCA := func(any) { caQueue.Add(name) }
		if _, err := secrets.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueueCA, UpdateFunc: func(_, n any) { enqueueCA(n) }, DeleteFunc: enqueueCA}); err != nil {
			return err
		}
		secretInformers.Start(ctx.Done())
		synced = append(synced, secrets.Informer().HasSynced)

		// The signer's CSRs only: the API server filters by spec.signerName.
		csrInformers := informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("spec.signerName", name).String()
		}))
		csrInformer := csrInformers.Certificates().V1().CertificateSigningRequests()
		if _, err := csrInformer.Informer().AddEventHandler(requestEvents(h.seen, csrQueue, func(m metav1.Object) csrKey { return csrKey{signer: name, name: m.GetName()} })); err != nil {
			return err
		}
		csrLister = csrInformer.Lister()
		h.signers[name] = &signerRuntime{rules: rules, csrs: csrLister, ca: mgr}
		csrInformers.Start(ctx.Done())
		synced = append(synced, csrInformer.Informer().HasSynced)

		// Its PodCertificateRequests, where the API serves them: the kubelet's requests
		// for podCertificate volumes naming this signer.
		ps := &pcrSigner{rules: rules, ca: mgr}
		if pcrVersion != "" {
			pcrInformers := informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
				lo.FieldSelector = fields.OneTermEqualSelector("spec.signerName", name).String()
			}))
			var informer cache.SharedIndexInformer
			if pcrVersion == certificatesv1.SchemeGroupVersion.String() {
				i := pcrInformers.Certificates().V1().PodCertificateRequests()
				informer, ps.pcrs = i.Informer(), i.Lister()
			} else {
				i := pcrInformers.Certificates().V1beta1().PodCertificateRequests()
				informer, ps.betaPCRs = i.Informer(), i.Lister()
			}
			if _, err := informer.AddEventHandler(requestEvents(pcrs.seen, pcrQueue, func(m metav1.Object) pcrKey {
				return pcrKey{signer: name, namespace: m.GetNamespace(), name: m.GetName()}
			})); err != nil {
				return err
			}
			pcrs.signers[name] = ps
			pcrInformers.Start(ctx.Done())
			synced = append(synced, informer.HasSynced)
		}
		mgr.loaded = func() {
			requeueAll(csrLister, name, csrQueue)
			ps.requeueAll(name, pcrQueue)
		}
		go mgr.keys.watch(ctx, mgr.signingKey, mgr.loaded)

		// A live bundle deleted or edited by anyone is restored; the publisher reads
		// what is live from the same watch, and applies only a difference.
		mgr.publisher.live = make([]cache.Store, len(mgr.publisher.stores))
		for i, store := range mgr.publisher.stores {
			opts, _, _ := bundle.Selector{SignerName: name, LabelSelector: &metav1.LabelSelector{}}.ListOptions(store.API().Form)
			var ctrl cache.Controller
			mgr.publisher.live[i], ctrl = cache.NewInformerWithOptions(cache.InformerOptions{
				ListerWatcher: store.ListWatch(opts), ObjectType: &certificatesv1.ClusterTrustBundle{},
				Handler: cache.ResourceEventHandlerFuncs{
					AddFunc: func(any) { caQueue.Add(name) }, UpdateFunc: func(any, any) { caQueue.Add(name) }, DeleteFunc: func(any) { caQueue.Add(name) },
				},
			})
			go ctrl.RunWithContext(ctx)
			synced = append(synced, ctrl.HasSynced)
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil
	}
	for name := range managers {
		caQueue.Add(name)
	}

	queue.Work(ctx, caQueue, 1, "CA", func(ctx context.Context, name string) (time.Duration, error) { return managers[name].reconcile(ctx) })
	queue.Work(ctx, csrQueue, o.Workers, "CertificateSigningRequest", waiting(h.handle, m.waits.MustCurryWith(prometheus.Labels{"kind": kindCSR})))
	queue.Work(ctx, pcrQueue, o.Workers, "PodCertificateRequest", waiting(pcrs.handle, m.waits.MustCurryWith(prometheus.Labels{"kind": kindPCR})))
	ready.Store(true)
	defer ready.Store(false)
	klog.InfoS("Signing", "signers", pol.SignerNames(), "bundleAPIs", writers, "workers", o.Workers, "podCertificateRequests", pcrVersion)
	<-ctx.Done()
	return nil
}

// requestEvents handles a kind of request's events: each one marks the request seen
// (its handler forgets it once nothing is left to do) and queues it under key; a
// deletion forgets it, also when the informer knows only its last state.
func requestEvents[K comparable](seen *seenAt[K], q workqueue.TypedRateLimitingInterface[K], key func(metav1.Object) K) cache.ResourceEventHandlerFuncs {
	enqueue := func(obj any) {
		if m, err := meta.Accessor(obj); err == nil {
			seen.saw(key(m))
			q.Add(key(m))
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, n any) { enqueue(n) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if m, err := meta.Accessor(obj); err == nil {
				seen.done(key(m))
			}
		},
	}
}

// requeueAll queues every CSR of signer, for when its first CA is loaded.
func requeueAll(lister certlisters.CertificateSigningRequestLister, signer string, q workqueue.TypedRateLimitingInterface[csrKey]) {
	csrs, err := lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, csr := range csrs {
		q.Add(csrKey{signer: signer, name: csr.Name})
	}
}

// waiting handles a request with handle. A request that cannot be issued through no
// fault of its own waits without growing its backoff: a second for a signer whose CA
// is not loaded yet (the CA manager also requeues the signer's requests once it loads
// one), keeperProbe for a keeper that cannot sign (requeued too once it answers).
func waiting[K comparable](handle func(context.Context, K) error, waits *prometheus.CounterVec) queue.Handle[K] {
	return func(ctx context.Context, key K) (time.Duration, error) {
		err := handle(ctx, key)
		var unavailable *keeper.UnavailableError
		switch {
		case errors.Is(err, errCANotReady):
			waits.WithLabelValues(reasonCANotLoaded).Inc()
			return time.Second, nil
		case errors.As(err, &unavailable):
			waits.WithLabelValues(v1alpha1.ReasonKeyUnavailable).Inc()
			return keeperProbe, nil
		}
		return 0, err
	}
}

// reasonCANotLoaded is the reason a request waits before its signer's CA is loaded.
const reasonCANotLoaded = "CANotLoaded"
