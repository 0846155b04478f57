package sidecar

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
)

// bundleWatches keeps every bundle source watched in exactly the APIs the server
// serves now, so a pod started before the mirror CRD was installed, or before the
// native API was turned on, picks the new API up without a restart, and a version no
// longer served stops contributing stale bundles.
type bundleWatches struct {
	dyn     dynamic.Interface
	sources []*bundleSource
	// lock guards the sources' stores, which syncs read from other goroutines.
	lock sync.Locker
	// newInformer makes a watch whose changes ask for a sync.
	newInformer func(cache.ListerWatcher) (cache.Store, watcher)

	apis map[string]*apiWatch
	// served is what update last made the watches follow.
	served tsbundle.Served
	// gone receives a signal when a watch is told its API is not served (404), so the
	// sidecar rediscovers at once instead of asking every time about every API.
	gone chan struct{}
}

// noteError signals gone on a 404 from a watched API.
func (w *bundleWatches) noteError(err error) {
	if !apierrors.IsNotFound(err) {
		return
	}
	select {
	case w.gone <- struct{}{}:
	default: // already signalled
	}
}

type apiWatch struct {
	stores map[*bundleSource]cache.Store
	stop   context.CancelFunc
}

// update makes the watched APIs match served: it starts watches for new APIs, waits
// up to syncWait (0: as long as ctx lasts) for their first list, then adds them to the
// sources; and it drops and stops those of APIs no longer served. It reports whether
// anything changed. A new API that does not list in time (the pod's ServiceAccount may
// not read it, say) is left out, to be tried again at the next update.
func (w *bundleWatches) update(ctx context.Context, served tsbundle.Served, syncWait time.Duration) (bool, error) {
	want := map[string]tsbundle.API{}
	for _, api := range served.APIs() {
		want[api.String()] = api
	}
	changed := false
	for key, api := range want {
		if _, ok := w.apis[key]; ok {
			continue
		}
		aw, synced, err := w.watch(ctx, api)
		if err != nil {
			return changed, err
		}
		waitCtx, cancel := ctx, context.CancelFunc(func() {})
		if syncWait > 0 {
			waitCtx, cancel = context.WithTimeout(ctx, syncWait)
		}
		ok := cache.WaitForCacheSync(waitCtx.Done(), synced...)
		cancel()
		if !ok {
			aw.stop()
			if ctx.Err() != nil {
				return changed, ctx.Err()
			}
			return changed, fmt.Errorf("the bundle API %s did not list within %s; check that the pod's ServiceAccount may list and watch it", key, syncWait)
		}
		w.lock.Lock()
		for src, store := range aw.stores {
			src.stores = append(src.stores, store)
		}
		w.lock.Unlock()
		w.apis[key] = aw
		changed = true
		klog.InfoS("Watching bundles in a newly served API", "api", key)
	}
	for key, aw := range w.apis {
		if _, ok := want[key]; ok {
			continue
		}
		w.lock.Lock()
		for src, store := range aw.stores {
			for i, s := range src.stores {
				if s == store {
					src.stores = append(src.stores[:i:i], src.stores[i+1:]...)
					break
				}
			}
		}
		w.lock.Unlock()
		aw.stop()
		delete(w.apis, key)
		changed = true
		klog.InfoS("Stopped watching bundles in an API no longer served", "api", key)
	}
	w.served = served
	return changed, nil
}

// watch starts one watch per source in api, narrowed on the server by its selector.
func (w *bundleWatches) watch(ctx context.Context, api tsbundle.API) (*apiWatch, []cache.InformerSynced, error) {
	ctx, stop := context.WithCancel(ctx)
	aw := &apiWatch{stores: map[*bundleSource]cache.Store{}, stop: stop}
	var synced []cache.InformerSynced
	for _, src := range w.sources {
		opts, ok, err := src.selector.ListOptions(api.Form)
		if err != nil {
			stop()
			return nil, nil, err
		}
		if !ok {
			continue
		}
		store, controller := w.newInformer(bundleapi.NewStore(w.dyn, api).ListWatchReporting(opts, w.noteError))
		go controller.RunWithContext(ctx)
		aw.stores[src] = store
		synced = append(synced, controller.HasSynced)
	}
	return aw, synced, nil
}
