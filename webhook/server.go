// Package webhook is trustsync's admission webhook: HTTPS routes that validate trust
// bundles and certificate signing requests and (with the injector) mutate pods. The
// domain rules live in bundle/, policy/ and injector/; this package decodes reviews,
// calls them, and turns their answers into admission responses.
package webhook

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	kwhprometheus "github.com/slok/kubewebhook/v2/pkg/metrics/prometheus"
	kwhwebhook "github.com/slok/kubewebhook/v2/pkg/webhook"
	kwhmutating "github.com/slok/kubewebhook/v2/pkg/webhook/mutating"
	kwhvalidating "github.com/slok/kubewebhook/v2/pkg/webhook/validating"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/kubeapi"
	"github.com/trustsync/trustsync/kubeapi/healthserver"
	"github.com/trustsync/trustsync/policy"
	"github.com/trustsync/trustsync/tenancy"
	"github.com/trustsync/trustsync/tenancy/grantcache"
)

// Config holds what the admission routes need.
type Config struct {
	Policy     *policy.Policy
	Authorizer Authorizer
	Clock      clock.PassiveClock
	// Registry receives the webhook's metrics and is served at /metrics.
	Registry *prometheus.Registry
	// Ready reports readiness at /readyz; nil means always ready.
	Ready func() bool
	// Injector configures /mutate/pods; Namespaces supplies namespace defaults (nil:
	// none).
	Injector   injector.Config
	Namespaces NamespaceAnnotations
	// NativeAPIs, when set, supplies Injector.NativeAPIs for each review: what the API
	// server serves can change while the webhook runs.
	NativeAPIs func() injector.NativeAPIs
	// NodeAgent, when set, supplies Injector.NodeAgent for each review: whether the
	// node agent's CSIDriver is installed now.
	NodeAgent func() bool
	// ReviewBytesInFlight bounds the admission review bytes held at once; 0 means
	// DefaultReviewBytesInFlight.
	ReviewBytesInFlight int64
	// Grants, when set, enforces tenancy on pods; Bundles says what a bundle asked
	// for by name is labelled (nil: known by its name alone).
	Grants  tenancy.Lookup
	Bundles tenancy.BundleLookup
}

// NewHandler returns every route: admission reviews, /healthz, /readyz, /metrics.
func NewHandler(cfg Config) (http.Handler, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Namespaces == nil {
		cfg.Namespaces = func(context.Context, string) (map[string]string, error) { return nil, nil }
	}
	if cfg.Ready == nil {
		cfg.Ready = func() bool { return true }
	}
	if cfg.ReviewBytesInFlight == 0 {
		cfg.ReviewBytesInFlight = DefaultReviewBytesInFlight
	}
	budget := newBodyBudget(cfg.ReviewBytesInFlight)
	metrics := NewMetrics(cfg.Registry)
	budget.register(cfg.Registry)
	recorder, err := kwhprometheus.NewRecorder(kwhprometheus.RecorderConfig{Registry: cfg.Registry})
	if err != nil {
		return nil, err
	}
	logger := kwhLogger{}
	router := mux.NewRouter()
	bundles := &bundleAdmission{bundles: cfg.Policy.Bundles, authz: cfg.Authorizer, clock: cfg.Clock, metrics: metrics}
	csrs := &csrAdmission{policy: cfg.Policy, metrics: metrics}
	// The bundle and CSR routes decode into unstructured objects: the CSR mutator must
	// not drop fields the compiled types do not know, and the bundle route takes two
	// kinds. The pods route is a kubewebhook Webhook of its own (podAdmission says
	// why), decoding only the pod fields the injector reads.
	pods := &podAdmission{cfg: cfg.Injector, namespaces: cfg.Namespaces, nativeAPIs: cfg.NativeAPIs, nodeAgent: cfg.NodeAgent, grants: cfg.Grants, bundles: cfg.Bundles, metrics: metrics}
	routes := []struct {
		path      string
		validator kwhvalidating.Validator
		mutator   kwhmutating.Mutator
		webhook   kwhwebhook.Webhook
	}{
		{path: routeBundles, validator: bundles},
		{path: routeValidateCSR, validator: csrs},
		{path: routeMutateCSR, mutator: csrs},
		{path: routeMutatePods, webhook: pods},
	}
	for _, r := range routes {
		wh := r.webhook
		switch {
		case r.validator != nil:
			wh, err = kwhvalidating.NewWebhook(kwhvalidating.WebhookConfig{ID: r.path, Obj: &unstructured.Unstructured{}, Validator: r.validator, Logger: logger})
		case r.mutator != nil:
			wh, err = kwhmutating.NewWebhook(kwhmutating.WebhookConfig{ID: r.path, Obj: &unstructured.Unstructured{}, Mutator: r.mutator, Logger: logger})
		}
		if err != nil {
			return nil, fmt.Errorf("failed to build webhook %s: %w", r.path, err)
		}
		h := reviewHandler{webhook: kwhwebhook.NewMeasuredWebhook(boundedRecorder{next: recorder}, wh)}
		router.Handle(r.path, timed(metrics, r.path, budget.limit(h))).Methods(http.MethodPost)
	}

	healthz, readyz := kubeapi.Probes(kubeapi.Unless(cfg.Ready, "not ready: caches not synced, the CA not yet trusted, or shutting down"))
	router.Handle("/healthz", healthz)
	router.Handle("/readyz", readyz)
	router.Handle("/metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	return router, nil
}

// timed records a route's latency, and failures as their outcome: the webhook's own
// (HTTP 5xx) as error, what an alert pages on, and a review it could not read (4xx:
// malformed, too large, from whoever can reach the port) as malformed, apart.
func timed(m *Metrics, route string, next http.Handler) http.Handler {
	latency := m.latency.WithLabelValues(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		latency.Observe(time.Since(start).Seconds())
		switch {
		case sw.status >= 500:
			m.outcome(route, outcomeError)
		case sw.status >= 400:
			m.outcome(route, outcomeMalformed)
		}
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (the body's read deadline).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// watchGrants keeps the namespaces' grants from watches of the TrustPolicies, the
// namespaces and the bundles served; namespace, trustsync's own, is exempt.
func watchGrants(ctx context.Context, restCfg *rest.Config, discovery kubeapi.ResourceLister, namespace string) (*grantcache.Cache, error) {
	c, err := grantcache.NewForConfig(restCfg, namespace, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	served, err := bundleapi.Discover(discovery)
	if err != nil {
		return nil, fmt.Errorf("cannot tell which bundle APIs are served, whose labels a grant may select: %w", err)
	}
	if err := c.WatchBundles(served, 10*time.Minute); err != nil {
		return nil, err
	}
	go c.Run(ctx)
	klog.InfoS("Enforcing TrustPolicies on pods", "exempt", namespace, "bundleAPIs", served.APIs())
	return c, nil
}

// Run serves until ctx is done, then shuts down gracefully: /readyz fails at once so
// the Service stops sending reviews, and in-flight reviews get the grace period. With
// self-managed TLS and a campaign, only the Lease's holder writes the Secret and the
// caBundle; a nil campaign lets every replica write.
func Run(ctx context.Context, o *Options, campaign Campaign) error {
	if err := o.Validate(); err != nil {
		return err
	}
	pol, err := policy.Load(o.PolicyFile)
	if err != nil {
		return err
	}
	pol.LogWarnings(o.PolicyFile)
	restCfg, err := kubeapi.RESTConfig(o.Flags, "trustsync-webhook")
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	// Probes must answer while the certificate is still being obtained (the API server
	// may be unreachable for minutes): liveness must not restart a replica that waits.
	// The plain-HTTP health address also serves /metrics, so that a scraper needs no
	// client certificate or trust in the webhook's serving CA. It stays up until Run
	// returns, through the graceful shutdown.
	var ready atomic.Pointer[func() bool]
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	healthCtx, stopHealth := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHealth()
	readyNow := func() bool { f := ready.Load(); return f != nil && (*f)() }
	if err := healthserver.Serve(healthCtx, o.HealthBindAddress(), registry,
		kubeapi.Unless(readyNow, "not ready: the serving certificate or caches are not in place yet, or shutting down")); err != nil {
		return err
	}
	// The serving certificate: the self-managed one in memory, or files (cert-manager's
	// Secret volume, say) reloaded when they change.
	var st *selfTLS
	var serving interface {
		GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
	}
	if o.SelfManagedTLS {
		if st, err = startSelfManagedTLS(ctx, o, restCfg, client, campaign); err != nil {
			return err
		}
		serving = st
	} else if serving, err = newCertReloader(o.TLSCertFile, o.TLSPrivateKeyFile, time.Second, clock.RealClock{}); err != nil {
		return err
	}
	registry.MustRegister(ServingCertificateCollector(serving.GetCertificate))

	factory := informers.NewSharedInformerFactory(client, 0)
	namespaces, synced := namespaceAnnotations(factory, client)
	csiDrivers := factory.Storage().V1().CSIDrivers()
	csiDriversSynced := csiDrivers.Informer().HasSynced
	nodeAgent := func() bool {
		_, err := csiDrivers.Lister().Get(contract.CSIDriverName)
		return err == nil
	}
	factory.Start(ctx.Done())
	var grants tenancy.Lookup
	var bundles tenancy.BundleLookup
	grantsSynced := func() bool { return true }
	if o.TenancyEnforced {
		c, err := watchGrants(ctx, restCfg, client.Discovery(), o.Namespace)
		if err != nil {
			return err
		}
		grants, bundles, grantsSynced = c.For, c.Bundle, c.HasSynced
	}
	native := &nativeAPIs{}
	go native.run(ctx, client.Discovery(), time.Minute)

	var shuttingDown atomic.Bool
	// Ready once the namespace cache has synced and, with self-managed TLS, once the
	// API server trusts the certificate served: `helm install --wait` then returns
	// only when pods can be admitted.
	readyFn := func() bool {
		return synced() && csiDriversSynced() && grantsSynced() && native.discovered() && !shuttingDown.Load() && (st == nil || st.caTrusted(ctx))
	}
	ready.Store(&readyFn)
	handler, err := NewHandler(Config{
		Policy:     pol,
		Authorizer: SubjectAccessReviewer{Client: client.AuthorizationV1().SubjectAccessReviews()},
		Registry:   registry,
		Ready:      readyFn,
		Injector: injector.Config{
			Image: o.SidecarImage, ImagePullPolicy: corev1.PullPolicy(o.SidecarImagePullPolicy),
			ImagePullSecrets: o.SidecarImagePullSecrets,
			DefaultMode:      v1alpha1.Mode(o.DefaultSidecarMode), Namespace: o.Namespace, Policy: pol,
		},
		Namespaces:          namespaces,
		NativeAPIs:          native.get,
		NodeAgent:           nodeAgent,
		ReviewBytesInFlight: o.ReviewBytesInFlight,
		Grants:              grants,
		Bundles:             bundles,
	})
	if err != nil {
		return err
	}

	addr := net.JoinHostPort(o.BindAddress, strconv.Itoa(o.SecurePort))
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           handler,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: serving.GetCertificate},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          nil,
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(listener, "", "") }()
	klog.InfoS("Serving admission reviews", "address", listener.Addr().String(), "policySigners", pol.SignerNames())

	select {
	case err := <-served:
		return fmt.Errorf("HTTPS server stopped: %w", err)
	case <-ctx.Done():
	}
	// Keep serving while the API server notices: the endpoint goes when the pod is
	// deleted or unready, and reviews already routed here must still be answered.
	shuttingDown.Store(true)
	klog.InfoS("Shutting down: still serving while the API server stops sending", "delay", o.ShutdownDelay, "gracePeriod", o.ShutdownGracePeriod)
	select {
	case err := <-served:
		return fmt.Errorf("HTTPS server stopped: %w", err)
	case <-time.After(o.ShutdownDelay):
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), o.ShutdownGracePeriod)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("graceful shutdown did not finish: %w", err)
	}
	if st != nil && st.released != nil {
		select {
		case <-st.released:
		case <-time.After(5 * time.Second):
			klog.InfoS("Exiting before the Lease was released; the next leader waits for it to expire")
		}
	}
	return nil
}

// namespaceAnnotations serves namespace defaults from an informer's cache, falling back
// to a live read for a namespace created a moment ago that the cache has not seen yet.
func namespaceAnnotations(factory informers.SharedInformerFactory, client kubernetes.Interface) (NamespaceAnnotations, func() bool) {
	informer := factory.Core().V1().Namespaces()
	lister := informer.Lister()
	synced := informer.Informer().HasSynced
	get := func(ctx context.Context, name string) (map[string]string, error) {
		ns, err := lister.Get(name)
		if apierrors.IsNotFound(err) {
			ns, err = client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil {
			return nil, fmt.Errorf("failed to get namespace %q: %w", name, err)
		}
		return ns.Annotations, nil
	}
	return get, synced
}

// startSelfManagedTLS makes the serving certificate available (retrying while
// the API server is unreachable, or while no leader has created the Secret yet) and
// keeps it, and the configurations' caBundle, current in the background.
func startSelfManagedTLS(ctx context.Context, o *Options, restCfg *rest.Config, client kubernetes.Interface, campaign Campaign) (*selfTLS, error) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events(o.Namespace)})
	go func() { <-ctx.Done(); broadcaster.Shutdown() }()
	st := &selfTLS{client: client, namespace: o.Namespace, secretName: o.TLSSecretName, service: o.ServiceName, configName: o.WebhookConfigurationName, clock: clock.RealClock{},
		events: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "trustsync-webhook"})}
	elected := make(chan struct{}, 1)
	if campaign != nil {
		var leading atomic.Bool
		st.leading = leading.Load
		released := make(chan struct{})
		st.released = released
		campaignForTLS(ctx, campaign, o, restCfg, &leading, elected, released)
	}
	err := kubeapi.Retry(ctx, time.Second, 10*time.Second, func(ctx context.Context) (bool, error) {
		if err := st.sync(ctx); err != nil {
			klog.ErrorS(err, "Cannot set up self-managed TLS yet; retrying")
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	go st.run(ctx, 10*time.Second, elected)
	return st, nil
}

// Campaign stands for a Lease until ctx ends or a held Lease is lost, running lead
// while it holds it (cmd/internal/lease builds it from the leader-election flags).
type Campaign = func(ctx context.Context, cfg *rest.Config, namespace, name string, lead func(context.Context)) error

// campaignForTLS stands for the Lease named after the TLS Secret until ctx is done,
// keeping leading true while this replica holds it and signalling elected when it takes
// it. Unlike the signer, losing the Lease is no reason to exit: every replica serves,
// the leader only writes, so after a lost Lease it stands again. released is closed
// once the Lease is given up on shutdown.
func campaignForTLS(ctx context.Context, campaign Campaign, o *Options, restCfg *rest.Config, leading *atomic.Bool, elected chan<- struct{}, released chan<- struct{}) {
	go func() {
		defer close(released)
		for ctx.Err() == nil {
			err := campaign(ctx, restCfg, o.Namespace, o.TLSSecretName, func(ctx context.Context) {
				leading.Store(true)
				defer leading.Store(false)
				select {
				case elected <- struct{}{}:
				default:
				}
				<-ctx.Done()
			})
			if err != nil {
				klog.ErrorS(err, "Standing for the webhook TLS Lease again")
			}
		}
	}()
}
