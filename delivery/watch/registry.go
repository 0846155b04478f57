// Package watch is the pipeline's first stage: list-watches of what pods read
// (bundle selections in every served bundle API, ConfigMaps and Secrets by name), shared
// through a Registry. One watch serves every pipeline that reads the same thing: it is
// started by the first and stopped when the last lets go, so a process running many
// pods' pipelines (a node agent) holds one watch per distinct source, not one per pod.
// Each watch keeps what it holds under its own lock and hands out the objects as they
// are; nobody modifies them.
package watch

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/kubeapi"
)

// Registry holds the running watches, by what they watch.
type Registry struct {
	// ctx bounds every watch the registry starts: a watch outlives the request that
	// started it, since other pipelines may share it.
	ctx       context.Context
	dyn       dynamic.Interface
	discovery kubeapi.ResourceLister

	mu      sync.Mutex
	objects map[string]*object
	bundles map[string]*bundles
	// served is what the bundle watches follow: the bundle APIs served now.
	served tsbundle.Served
	// gone receives a signal when a watch is told its API is not served (404), so the
	// registry rediscovers at once instead of asking every time about every API.
	gone chan struct{}
}

// New returns a registry whose watches run until ctx is done. dyn reads the bundle
// APIs that discovery says are served; either may be nil when no bundle is watched.
func New(ctx context.Context, dyn dynamic.Interface, discovery kubeapi.ResourceLister) *Registry {
	return &Registry{ctx: ctx, dyn: dyn, discovery: discovery, objects: map[string]*object{}, bundles: map[string]*bundles{}, gone: make(chan struct{}, 1)}
}

// Request is what one pipeline reads.
type Request struct {
	// Bundles are the bundle selections, by a key that identifies what each selects.
	Bundles map[string]tsbundle.Selector
	// Namespace holds the ConfigMaps and Secrets, read through Client.
	Namespace           string
	ConfigMaps, Secrets []string
	Client              rest.Interface
	// ClientKey names whose credentials Client carries: the same object read with
	// different credentials is watched separately, so nobody reads through another's
	// permission.
	ClientKey string
}

// Set is one pipeline's watches, every change to any of them signalled on one channel.
type Set struct {
	reg        *Registry
	changed    chan struct{}
	bundles    map[string]*bundles
	configMaps map[string]*object
	secrets    map[string]*object
}

// Acquire starts (or joins) the watches req needs. Bundle selections are watched in
// the APIs served now (Discover first); Close lets go of them.
func (r *Registry) Acquire(req Request) (*Set, error) {
	s := &Set{reg: r, changed: make(chan struct{}, 1), bundles: map[string]*bundles{}, configMaps: map[string]*object{}, secrets: map[string]*object{}}
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, sel := range req.Bundles {
		b, err := r.bundlesLocked(key, sel)
		if err != nil {
			s.closeLocked()
			return nil, err
		}
		b.subscribe(s.changed)
		s.bundles[key] = b
	}
	for _, name := range req.ConfigMaps {
		o := r.objectLocked(req, "configmaps", name, &corev1.ConfigMap{})
		o.subscribe(s.changed)
		s.configMaps[name] = o
	}
	for _, name := range req.Secrets {
		o := r.objectLocked(req, "secrets", name, &corev1.Secret{})
		o.subscribe(s.changed)
		s.secrets[name] = o
	}
	return s, nil
}

// Changed receives a signal after any of the set's watches changed.
func (s *Set) Changed() <-chan struct{} { return s.changed }

// HasSynced reports whether every watch of the set has listed once.
func (s *Set) HasSynced() bool {
	for _, b := range s.bundles {
		if !b.hasSynced() {
			return false
		}
	}
	for _, o := range s.configMaps {
		if !o.watch.HasSynced() {
			return false
		}
	}
	for _, o := range s.secrets {
		if !o.watch.HasSynced() {
			return false
		}
	}
	return true
}

// NotSynced says, for each watch of the set that has not listed yet, what it watches
// and why not: the last list's error (forbidden, not found), or that none has
// answered yet.
func (s *Set) NotSynced() []error {
	var out []error
	note := func(what string, w watcher) {
		if w.HasSynced() {
			return
		}
		if err := w.ListErr(); err != nil {
			out = append(out, fmt.Errorf("%s: %w", what, err))
		} else {
			out = append(out, fmt.Errorf("%s: not listed yet", what))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.configMaps)) {
		note(fmt.Sprintf("ConfigMap %q", name), s.configMaps[name].watch)
	}
	for _, name := range slices.Sorted(maps.Keys(s.secrets)) {
		note(fmt.Sprintf("Secret %q", name), s.secrets[name].watch)
	}
	for _, key := range slices.Sorted(maps.Keys(s.bundles)) {
		b := s.bundles[key]
		b.mu.Lock()
		for _, api := range slices.Sorted(maps.Keys(b.apis)) {
			note(fmt.Sprintf("bundles %s in %s", key, api), b.apis[api].watch)
		}
		b.mu.Unlock()
	}
	return out
}

// WaitSynced waits until HasSynced or ctx is done, and reports which.
func (s *Set) WaitSynced(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), s.HasSynced)
}

// Bundles is what the selection keyed key holds now, in every served API.
func (s *Set) Bundles(key string) []*certificatesv1.ClusterTrustBundle {
	if b, ok := s.bundles[key]; ok {
		return b.list()
	}
	return nil
}

// ConfigMap is the named ConfigMap as watched now.
func (s *Set) ConfigMap(name string) (*corev1.ConfigMap, bool) {
	obj, ok := get(s.configMaps[name])
	cm, _ := obj.(*corev1.ConfigMap)
	return cm, ok && cm != nil
}

// Secret is the named Secret as watched now.
func (s *Set) Secret(name string) (*corev1.Secret, bool) {
	obj, ok := get(s.secrets[name])
	sec, _ := obj.(*corev1.Secret)
	return sec, ok && sec != nil
}

// Close lets go of the set's watches; a watch nobody else reads stops.
func (s *Set) Close() {
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	s.closeLocked()
}

func (s *Set) closeLocked() {
	for key, b := range s.bundles {
		b.unsubscribe(s.changed)
		if b.refs--; b.refs == 0 {
			b.stopAll()
			delete(s.reg.bundles, key)
		}
	}
	for _, objs := range []map[string]*object{s.configMaps, s.secrets} {
		for _, o := range objs {
			o.unsubscribe(s.changed)
			if o.refs--; o.refs == 0 {
				o.stop()
				delete(s.reg.objects, o.key)
			}
		}
	}
	s.bundles, s.configMaps, s.secrets = nil, nil, nil
}

// Watches is how many list-watches the registry runs now: one per object and per
// bundle selection and served API.
func (r *Registry) Watches() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.objects)
	for _, b := range r.bundles {
		b.mu.Lock()
		n += len(b.apis)
		b.mu.Unlock()
	}
	return n
}

// subscribers are the change channels of the sets reading one watch.
type subscribers struct {
	mu   sync.Mutex
	subs []chan struct{}
}

func (s *subscribers) subscribe(c chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs = append(s.subs, c)
}

func (s *subscribers) unsubscribe(c chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, sub := range s.subs {
		if sub == c {
			s.subs = append(s.subs[:i:i], s.subs[i+1:]...)
			return
		}
	}
}

// notify signals every subscriber without waiting: a signal already pending says
// the same.
func (s *subscribers) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// object is the watch of one named ConfigMap or Secret.
type object struct {
	subscribers
	key   string
	refs  int
	store cache.Store
	watch watcher
	stop  context.CancelFunc
}

func (r *Registry) objectLocked(req Request, resource, name string, obj runtime.Object) *object {
	key := fmt.Sprintf("%s\x00%s/%s/%s", req.ClientKey, resource, req.Namespace, name)
	if o, ok := r.objects[key]; ok {
		o.refs++
		return o
	}
	o := &object{key: key, refs: 1}
	// RBAC can grant list and watch on a resourceName when the request selects that
	// name, so a pod may be allowed to read just its own objects.
	lw := cache.NewListWatchFromClient(req.Client, resource, req.Namespace, fields.OneTermEqualSelector("metadata.name", name))
	o.store, o.watch = newReflectorWatch(lw, obj, o.notify)
	ctx, stop := context.WithCancel(r.ctx)
	o.stop = stop
	go o.watch.RunWithContext(ctx)
	r.objects[key] = o
	return o
}

func get(o *object) (runtime.Object, bool) {
	if o == nil {
		return nil, false
	}
	for _, obj := range o.store.List() {
		return obj.(runtime.Object), true
	}
	return nil, false
}

// bundles is one bundle selection, watched in every served API, narrowed on the
// server by its selector.
type bundles struct {
	subscribers
	sel  tsbundle.Selector
	refs int

	mu   sync.Mutex
	apis map[string]*apiWatch
}

type apiWatch struct {
	store cache.Store
	watch watcher
	stop  context.CancelFunc
}

func (r *Registry) bundlesLocked(key string, sel tsbundle.Selector) (*bundles, error) {
	if b, ok := r.bundles[key]; ok {
		b.refs++
		return b, nil
	}
	b := &bundles{sel: sel, refs: 1, apis: map[string]*apiWatch{}}
	for _, api := range r.served.APIs() {
		aw, err := r.watchAPI(b, api)
		if err != nil {
			b.stopAll()
			return nil, err
		}
		if aw != nil {
			b.apis[api.String()] = aw
		}
	}
	r.bundles[key] = b
	return b, nil
}

// watchAPI starts b's watch in api; nil when the selection cannot be asked of api.
func (r *Registry) watchAPI(b *bundles, api tsbundle.API) (*apiWatch, error) {
	opts, ok, err := b.sel.ListOptions(api.Form)
	if err != nil || !ok {
		return nil, err
	}
	store, w := newReflectorWatch(bundleapi.NewStore(r.dyn, api).ListWatchReporting(opts, r.noteError), &certificatesv1.ClusterTrustBundle{}, b.notify)
	ctx, stop := context.WithCancel(r.ctx)
	go w.RunWithContext(ctx)
	return &apiWatch{store: store, watch: w, stop: stop}, nil
}

func (b *bundles) list() []*certificatesv1.ClusterTrustBundle {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*certificatesv1.ClusterTrustBundle
	for _, aw := range b.apis {
		for _, obj := range aw.store.List() {
			out = append(out, obj.(*certificatesv1.ClusterTrustBundle))
		}
	}
	return out
}

func (b *bundles) hasSynced() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, aw := range b.apis {
		if !aw.watch.HasSynced() {
			return false
		}
	}
	return true
}

func (b *bundles) stopAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for key, aw := range b.apis {
		aw.stop()
		delete(b.apis, key)
	}
}

// noteError signals gone on a 404 from a watched API.
func (r *Registry) noteError(err error) {
	if !apierrors.IsNotFound(err) {
		return
	}
	select {
	case r.gone <- struct{}{}:
	default: // already signalled
	}
}

// Discover finds the served bundle APIs, retrying while the API server is unreachable,
// until ctx is done. Selections acquired after it are watched in every one of them.
func (r *Registry) Discover(ctx context.Context) (tsbundle.Served, error) {
	var served tsbundle.Served
	err := kubeapi.Retry(ctx, time.Second, 30*time.Second, func(context.Context) (bool, error) {
		var err error
		served, err = bundleapi.Discover(r.discovery)
		if err != nil {
			klog.ErrorS(err, "Cannot discover the bundle APIs yet; retrying")
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return served, err
	}
	_, err = r.Follow(ctx, served, 0)
	return served, err
}

// Run rediscovers the served bundle APIs every interval (0: never), and at once when a
// watch is told its API is gone, until ctx is done. The periodic round asks only about
// APIs that could newly be served (none once native v1 and the mirror are watched); the
// round after a 404 asks about every one. A failure leaves the watches as they are
// until the next round.
func (r *Registry) Run(ctx context.Context, interval time.Duration) {
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		full := false
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-r.gone:
			full = true
		}
		r.mu.Lock()
		current := r.served
		r.mu.Unlock()
		var served tsbundle.Served
		var err error
		if full {
			served, err = bundleapi.Discover(r.discovery)
		} else {
			served, err = bundleapi.DiscoverNew(r.discovery, current)
		}
		if err != nil {
			klog.ErrorS(err, "Cannot rediscover the bundle APIs; keeping the current watches")
			continue
		}
		// A new API gets 30 s to list before it is left out until the next round.
		if _, err := r.Follow(ctx, served, 30*time.Second); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Cannot watch a newly served bundle API; retrying at the next rediscovery")
		}
	}
}

// Follow makes every bundle selection watched in exactly the served APIs, so a pod
// started before the mirror CRD was installed, or before the native API was turned
// on, picks the new API up without a restart, and a version no longer served stops
// contributing stale bundles. A newly served API's watches join their selections only
// once they listed, within syncWait (0: as long as ctx lasts); one that does not (the
// pod's ServiceAccount may not read it, say) is left out, to be tried again at the next
// round. It reports whether any selection changed.
func (r *Registry) Follow(ctx context.Context, served tsbundle.Served, syncWait time.Duration) (bool, error) {
	want := map[string]tsbundle.API{}
	for _, api := range served.APIs() {
		want[api.String()] = api
	}
	r.mu.Lock()
	current := map[string]bool{}
	for _, api := range r.served.APIs() {
		current[api.String()] = true
	}
	r.mu.Unlock()
	changed := false
	for key, api := range want {
		if current[key] {
			continue
		}
		if err := r.addAPI(ctx, api, syncWait); err != nil {
			return changed, err
		}
		changed = true
		klog.InfoS("Watching bundles in a newly served API", "api", key)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for key := range current {
		if _, ok := want[key]; ok {
			continue
		}
		for _, b := range r.bundles {
			b.mu.Lock()
			if aw, ok := b.apis[key]; ok {
				aw.stop()
				delete(b.apis, key)
			}
			b.mu.Unlock()
			b.notify()
		}
		changed = true
		klog.InfoS("Stopped watching bundles in an API no longer served", "api", key)
	}
	r.served = served
	return changed, nil
}

// addAPI starts every selection's watch in api, waits for them to list, and only then
// adds them, so that no running pipeline renders from a half-listed API. The wait
// holds no lock: pipelines come and go meanwhile, and a selection acquired during it
// is watched in api at once (its pipeline waits for its first list anyway).
func (r *Registry) addAPI(ctx context.Context, api tsbundle.API, syncWait time.Duration) error {
	r.mu.Lock()
	started := map[*bundles]*apiWatch{}
	var synced []cache.InformerSynced
	stopAll := func() {
		for _, aw := range started {
			aw.stop()
		}
	}
	for _, b := range r.bundles {
		aw, err := r.watchAPI(b, api)
		if err != nil {
			stopAll()
			r.mu.Unlock()
			return err
		}
		if aw != nil {
			started[b] = aw
			synced = append(synced, aw.watch.HasSynced)
		}
	}
	r.mu.Unlock()
	waitCtx, cancel := ctx, context.CancelFunc(func() {})
	if syncWait > 0 {
		waitCtx, cancel = context.WithTimeout(ctx, syncWait)
	}
	ok := cache.WaitForCacheSync(waitCtx.Done(), synced...)
	cancel()
	if !ok {
		stopAll()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("the bundle API %s did not list within %s; check that the pod's ServiceAccount may list and watch it", api, syncWait)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for b, aw := range started {
		if b.refs == 0 { // released during the wait
			aw.stop()
		}
	}
	for _, b := range r.bundles {
		aw, ok := started[b]
		if !ok {
			var err error
			if aw, err = r.watchAPI(b, api); err != nil || aw == nil {
				continue // the error is the selection's own, reported when it was acquired
			}
		}
		b.mu.Lock()
		b.apis[api.String()] = aw
		b.mu.Unlock()
		b.notify()
	}
	return nil
}
