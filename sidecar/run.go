// Package sidecar is the trust-sync sidecar: it watches the sources a pod asked for
// (bundles of both kinds, ConfigMaps, Secrets, the public roots) and keeps the merged,
// deduplicated trust files current in the shared volume, atomically, within seconds of
// a change, and never worse than the last good content.
package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/sidecar/contract"
)

// resyncPeriod re-renders the files even without a change, as a safety net; changes
// themselves arrive by watch within moments.
const resyncPeriod = 5 * time.Minute

// sidecar is a set of watches feeding one syncer.
type sidecar struct {
	syncer      *syncer
	bundles     *bundleWatches // nil when no source selects bundles
	core        rest.Interface
	cert        *certManager // nil without --certificate
	reload      *reloader    // nil unless the app is to be told of changes
	controllers []watcher
	changed     chan struct{}
	stopEvents  func()
}

func setup(ctx context.Context, o *Options, m *metrics) (*sidecar, error) {
	cfg, err := bundleapi.RESTConfig(o.Kubeconfig, o.KubeAPIQPS, o.KubeAPIBurst, "trustsync-sidecar")
	if err != nil {
		return nil, err
	}
	core, err := coreClient(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	s := &sidecar{changed: make(chan struct{}, 1), core: core}
	groups := groupByPath(o.Spec.Sources)
	var served tsbundle.Served
	if needsBundles(o.Spec.Sources) {
		if served, err = discover(ctx, core); err != nil {
			return nil, err
		}
		if len(served.APIs()) == 0 {
			klog.InfoS("Neither the native ClusterTrustBundle API nor trustsync's mirror CRD is served yet; bundle sources match nothing until one is", "rediscoveryInterval", o.APIDiscoveryInterval)
		}
		if s.bundles, err = s.bundleSources(groups, dyn); err != nil {
			return nil, err
		}
	}
	s.watchObjects(groups, core, o.PodNamespace)

	events, stop := newPodEvents(ctx, core, o)
	s.stopEvents = stop
	clk := clock.RealClock{}
	writer := NewAtomicWriter(o.Spec.Dir)
	var observers []observer
	if m != nil {
		observers = append(observers, m)
	}
	if w := newExpiryWarner(o.Spec.ExpiryWarningDays, events, clk); w != nil {
		observers = append(observers, w)
	}
	if r := o.Spec.Reload; r != nil {
		var targets []reloadTarget
		if r.URL != "" {
			targets = append(targets, newURLTarget(r.URL))
		}
		if r.Signal != "" {
			targets = append(targets, newSignalTarget(r.Signal, r.Container))
		}
		s.reload = newReloader(targets, events, clk)
		s.reload.metrics = m
		observers = append(observers, s.reload)
	}
	// The reporter goes last: its "Wrote trust files" then follows every other
	// observer's decision about the same write (the reloader's, say) in the log.
	observers = append(observers, &eventReporter{events: events, failing: failureEvents{clock: clk}})
	if s.syncer, err = newSyncer(groups, writer, clk, observers...); err != nil {
		return nil, err
	}
	if s.bundles != nil {
		s.bundles.lock = &s.syncer.mu
		if _, err := s.bundles.update(ctx, served, 0); err != nil {
			return nil, err
		}
	}
	if c := o.Spec.Certificate; c != nil {
		csrs, err := csrClient(cfg)
		if err != nil {
			return nil, err
		}
		s.cert = &certManager{
			opts: certOptions{
				signer: c.Signer, expirationSeconds: c.ExpirationSeconds, dnsNames: c.DNSNames,
				keyType: c.KeyType, credentialBundle: c.CredentialBundle, spiffeID: o.spiffeID(),
				podName: o.PodName, podUID: o.PodUID, stateDir: c.StateDir,
			},
			api: restCSRs{c: csrs, poll: csrPollFirst, pollCap: csrPollCap}, clock: clk, jitter: rand.Float64, events: events, metrics: m, failing: failureEvents{clock: clk},
			write: func() error { return s.syncer.sync().writeErr },
		}
		existing, err := writer.Read()
		if err != nil {
			return nil, err
		}
		s.cert.adopt(existing)
		s.syncer.extra = s.cert.files
		s.syncer.certificate = true
	}
	return s, nil
}

func needsBundles(sources []contract.Source) bool {
	for _, src := range sources {
		if _, ok := src.Selector(); ok {
			return true
		}
	}
	return false
}

// discover finds the served bundle APIs, retrying while the API server is unreachable.
func discover(ctx context.Context, core rest.Interface) (tsbundle.Served, error) {
	var served tsbundle.Served
	err := bundleapi.Retry(ctx, time.Second, 30*time.Second, func(context.Context) (bool, error) {
		var err error
		served, err = bundleapi.Discover(bundleapi.RESTResourceLister{Client: core})
		if err != nil {
			klog.ErrorS(err, "Cannot discover the bundle APIs yet; retrying")
			return false, nil
		}
		return true, nil
	})
	return served, err
}

// bundleSources makes each name or signerName item a bundle source; bundleWatches
// then watches them in every served API.
func (s *sidecar) bundleSources(groups []pathGroup, dyn dynamic.Interface) (*bundleWatches, error) {
	w := &bundleWatches{dyn: dyn, apis: map[string]*apiWatch{}, gone: make(chan struct{}, 1), newInformer: func(lw cache.ListerWatcher) (cache.Store, watcher) {
		return s.newInformer(lw, &certificatesv1.ClusterTrustBundle{})
	}}
	// Items with the same selector (one bundle written as PEM and as a truststore,
	// say) share one source, so one watch per API: each watch holds its own copy of
	// the bundles it selects.
	bySelector := map[string]*bundleSource{}
	for gi := range groups {
		for ii := range groups[gi].items {
			it := &groups[gi].items[ii]
			sel, ok := it.source.Selector()
			if !ok {
				continue
			}
			key, err := selectorKey(sel)
			if err != nil {
				return nil, err
			}
			if src, ok := bySelector[key]; ok {
				it.from = src
				continue
			}
			match, err := sel.Matcher()
			if err != nil {
				return nil, err
			}
			src := &bundleSource{selector: sel, match: match}
			bySelector[key] = src
			w.sources = append(w.sources, src)
			it.from = src
		}
	}
	return w, nil
}

// selectorKey identifies what a selector selects: equal keys select the same bundles.
func selectorKey(sel tsbundle.Selector) (string, error) {
	labels := "nil"
	if sel.LabelSelector != nil {
		b, err := json.Marshal(sel.LabelSelector)
		if err != nil {
			return "", err
		}
		labels = string(b)
	}
	return sel.Name + "\x00" + sel.SignerName + "\x00" + labels, nil
}

// rediscover asks which bundle APIs are served now and adjusts the watches; a failure
// leaves them as they are until the next time. The periodic round asks only about
// APIs that could newly be served (none once native v1 and the mirror are watched);
// full, after a watch was told its API is gone, asks about every one.
func (s *sidecar) rediscover(ctx context.Context, full bool) bool {
	lister := bundleapi.RESTResourceLister{Client: s.core}
	var served tsbundle.Served
	var err error
	if full {
		served, err = bundleapi.Discover(lister)
	} else {
		served, err = bundleapi.DiscoverNew(lister, s.bundles.served)
	}
	if err != nil {
		klog.ErrorS(err, "Cannot rediscover the bundle APIs; keeping the current watches")
		return false
	}
	// Syncs wait while a new API lists, so the wait is bounded.
	changed, err := s.bundles.update(ctx, served, 30*time.Second)
	if err != nil && ctx.Err() == nil {
		klog.ErrorS(err, "Cannot watch a newly served bundle API; retrying at the next rediscovery")
	}
	return changed
}

// watchObjects gives each ConfigMap and Secret item a watch on its one object, the
// public roots their static source, and each truststore with a password Secret a
// watch on that Secret.
func (s *sidecar) watchObjects(groups []pathGroup, core rest.Interface, namespace string) {
	// One watch per object, however many items or stores read it.
	stores := map[string]cache.Store{}
	watch := func(resource, name string, obj runtime.Object) cache.Store {
		key := resource + "/" + name
		if store, ok := stores[key]; ok {
			return store
		}
		store := s.informer(objectListWatch(core, resource, namespace, name), obj)
		stores[key] = store
		return store
	}
	for gi := range groups {
		for ii := range groups[gi].items {
			it := &groups[gi].items[ii]
			switch src := it.source; {
			case src.ConfigMap != nil:
				it.from = &objectSource{kind: "ConfigMap", namespace: namespace, name: src.ConfigMap.Name, key: src.ConfigMap.Key,
					store: watch("configmaps", src.ConfigMap.Name, &corev1.ConfigMap{})}
			case src.Secret != nil:
				it.from = &objectSource{kind: "Secret", namespace: namespace, name: src.Secret.Name, key: src.Secret.Key,
					store: watch("secrets", src.Secret.Name, &corev1.Secret{})}
			case src.DefaultCAs:
				it.from = defaultCAsSource{}
			}
		}
		if ref := groups[gi].items[0].source.PasswordSecret; ref != nil {
			groups[gi].password = &passwordSource{path: groups[gi].path, namespace: namespace, name: ref.Name, key: ref.Key,
				store: watch("secrets", ref.Name, &corev1.Secret{})}
		}
	}
}

// informer creates a watch whose every change asks for a sync, started by start.
func (s *sidecar) informer(lw cache.ListerWatcher, obj runtime.Object) cache.Store {
	store, controller := s.newInformer(lw, obj)
	s.controllers = append(s.controllers, controller)
	return store
}

// newInformer creates a watch whose every change asks for a sync; the caller runs it.
func (s *sidecar) newInformer(lw cache.ListerWatcher, obj runtime.Object) (cache.Store, watcher) {
	return newReflectorWatch(lw, obj, func() {
		select {
		case s.changed <- struct{}{}:
		default: // a sync is already due
		}
	})
}

// gone signals that a bundle API stopped being served; nil (never) without bundles.
func (s *sidecar) gone() <-chan struct{} {
	if s.bundles == nil {
		return nil
	}
	return s.bundles.gone
}

func (s *sidecar) start(ctx context.Context) {
	for _, c := range s.controllers {
		go c.RunWithContext(ctx)
	}
}

func (s *sidecar) waitSynced(ctx context.Context) bool {
	synced := make([]cache.InformerSynced, 0, len(s.controllers))
	for _, c := range s.controllers {
		synced = append(synced, c.HasSynced)
	}
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}

// Run keeps the trust files current until ctx is done (SIGTERM). While the API server
// is unreachable the watches retry, the files keep their content, and the first change
// seen after recovery is written.
func Run(ctx context.Context, o *Options) error {
	if err := o.Validate(true); err != nil {
		return err
	}
	var m *metrics
	if o.MetricsAddress != "" {
		m = newMetrics(time.Now)
		if err := serveMetrics(ctx, o.MetricsAddress, m); err != nil {
			return err
		}
	}
	s, err := setup(ctx, o, m)
	if err != nil {
		return err
	}
	defer s.stopEvents()
	s.start(ctx)
	if !s.waitSynced(ctx) {
		return nil // shutting down before the first sync
	}
	klog.InfoS("Watching trust sources", "dir", o.Spec.Dir, "paths", len(s.syncer.groups), "watches", len(s.controllers), "certificate", o.Spec.Certificate != nil)
	if s.cert != nil {
		go s.cert.run(ctx)
	}
	if s.reload != nil {
		go s.reload.run(ctx)
	}
	var rediscovery <-chan time.Time
	if s.bundles != nil && o.APIDiscoveryInterval > 0 {
		t := time.NewTicker(o.APIDiscoveryInterval)
		defer t.Stop()
		rediscovery = t.C
	}
	failedWrites := 0
	freed := false
	for {
		// A write that failed (a full volume, say) is retried soon, backing off, not
		// at the next resync minutes away.
		next := resyncPeriod
		if res := s.syncer.sync(); res.writeErr != nil {
			next = min(backoffDelay(failedWrites), time.Minute)
			failedWrites++
		} else {
			failedWrites = 0
		}
		if !freed && len(s.changed) == 0 {
			// Start-up (discovery, the initial lists, the first merges and encodings)
			// is the sidecar's peak; once no change from it is pending, hand what it
			// freed back to the OS rather than wait for the scavenger, since this
			// process idles in every pod.
			debug.FreeOSMemory()
			freed = true
			// Said once, at the default level: it is also the mark after which
			// everything the start-up sync decided (the reload baseline among it) is
			// done, which tests and people reading the log wait for.
			var ms goruntime.MemStats
			goruntime.ReadMemStats(&ms)
			klog.InfoS("Start-up done: the files are current; returned start-up memory to the OS", "heapInUseKiB", ms.HeapInuse/1024, "heapReleasedKiB", ms.HeapReleased/1024, "stackKiB", ms.StackInuse/1024, "sysKiB", ms.Sys/1024)
		}
		if !s.waitForChange(ctx, rediscovery, next) {
			return nil
		}
	}
}

// waitForChange returns when a sync is due: a watched object changed, the time to the
// next sync passed, or the served bundle APIs changed. It returns false when ctx is
// done.
func (s *sidecar) waitForChange(ctx context.Context, rediscovery <-chan time.Time, next time.Duration) bool {
	resync := time.NewTimer(next)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-s.changed:
			return true
		case <-resync.C:
			return true
		case <-rediscovery:
			if s.rediscover(ctx, false) {
				return true
			}
		case <-s.gone():
			if s.rediscover(ctx, true) {
				return true
			}
		}
	}
}

// Init writes every file once and exits: the legacy mode's init container. A required
// file that cannot be written fails it with a one-line reason, also in the termination
// log, so `kubectl describe pod` says why the pod is not starting.
func Init(ctx context.Context, o *Options) error {
	if err := o.Validate(true); err != nil {
		return terminate(o, err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(o.InitTimeoutSecs)*time.Second)
	defer cancel()
	s, err := setup(ctx, o, nil)
	if err != nil {
		return terminate(o, fmt.Errorf("cannot reach the API server: %w", err))
	}
	defer s.stopEvents()
	s.start(ctx)
	if !s.waitSynced(ctx) {
		return terminate(o, fmt.Errorf("the API server did not answer within %ds", o.InitTimeoutSecs))
	}
	if s.cert != nil && s.cert.files() == nil {
		if err := s.cert.obtain(ctx); err != nil {
			return terminate(o, fmt.Errorf("workload certificate: %w", err))
		}
	}
	res := s.syncer.sync()
	var missing []string
	for _, p := range o.requiredPaths() {
		if err, failed := res.failed[p]; failed {
			missing = append(missing, fmt.Sprintf("%s: %v", p, err))
		}
	}
	if len(missing) > 0 {
		return terminate(o, errors.New(strings.Join(missing, "; ")))
	}
	return nil
}

// terminate writes err to the termination log and returns it.
func terminate(o *Options, err error) error {
	if o.TerminationLog != "" {
		if werr := os.WriteFile(o.TerminationLog, []byte(err.Error()+"\n"), 0o644); werr != nil {
			klog.ErrorS(werr, "Cannot write the termination log", "path", o.TerminationLog)
		}
	}
	return err
}

// Probe succeeds only when every required file exists and is not empty: the startup
// probe that holds app containers back until their trust files are in place.
func Probe(o *Options) error {
	if err := o.Validate(false); err != nil {
		return err
	}
	for _, p := range o.requiredPaths() {
		info, err := os.Stat(filepath.Join(o.Spec.Dir, p))
		switch {
		case err != nil:
			return fmt.Errorf("%s is not written yet: %w", p, err)
		case info.Size() == 0:
			return fmt.Errorf("%s is empty", p)
		}
	}
	return nil
}

func serveMetrics(ctx context.Context, addr string, m *metrics) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot serve metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return nil
}
