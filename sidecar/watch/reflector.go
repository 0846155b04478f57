package watch

import (
	"context"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// watcher is one source's list-and-watch, as the sidecar runs it.
type watcher interface {
	RunWithContext(ctx context.Context)
	HasSynced() bool
}

// watchBackoff is how the sidecar's watches retry while the API server is away: from
// 1 s, doubling, to at most 4 s, each wait stretched by up to as much again at random.
// client-go's informers wait up to 30 s (60 s with their jitter): after a 20-second
// outage a sidecar took 53 s to see updates again, in the middle of what may be a CA
// rotation. With this, a sidecar is back within 8 s of the API server's return, and
// 10,000 of them spread their reconnections over those seconds rather than arrive in
// one instant; each reconnection is a list by name or label, served from the API
// server's watch cache, and API Priority and Fairness queues what exceeds its share.
var watchBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 1, Steps: 3, Cap: 4 * time.Second}

// reflectorWatch is a Reflector with the sidecar's backoff feeding a store that asks
// for a sync on every change. client-go's informer constructors do not take a
// backoff, and the sidecar needs none of their queueing.
type reflectorWatch struct {
	reflector *cache.Reflector
	store     *notifyingStore
}

func newReflectorWatch(lw cache.ListerWatcher, obj runtime.Object, changed func()) (cache.Store, watcher) {
	store := &notifyingStore{Store: cache.NewStore(cache.DeletionHandlingMetaNamespaceKeyFunc), changed: changed}
	backoff := watchBackoff
	r := cache.NewReflectorWithOptions(lw, obj, store, cache.ReflectorOptions{Backoff: &backoff})
	return store, &reflectorWatch{reflector: r, store: store}
}

func (w *reflectorWatch) RunWithContext(ctx context.Context) { w.reflector.RunWithContext(ctx) }

// HasSynced reports whether the first list has reached the store.
func (w *reflectorWatch) HasSynced() bool { return w.store.synced.Load() }

// notifyingStore is a store that calls changed after every write to it.
type notifyingStore struct {
	cache.Store
	changed func()
	synced  atomic.Bool
}

func (s *notifyingStore) Add(obj any) error    { return s.after(s.Store.Add(obj)) }
func (s *notifyingStore) Update(obj any) error { return s.after(s.Store.Update(obj)) }
func (s *notifyingStore) Delete(obj any) error { return s.after(s.Store.Delete(obj)) }

func (s *notifyingStore) Replace(list []any, rv string) error {
	err := s.Store.Replace(list, rv)
	if err == nil {
		s.synced.Store(true)
	}
	return s.after(err)
}

func (s *notifyingStore) after(err error) error {
	if err == nil {
		s.changed()
	}
	return err
}
