package watch

import (
	"context"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// watcher is one source's list-and-watch, as the sidecar runs it.
type watcher interface {
	RunWithContext(ctx context.Context)
	HasSynced() bool
	// ListErr is why the last list failed (forbidden, say), nil after one succeeded.
	ListErr() error
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
	lw        *errorKeepingLW
}

func newReflectorWatch(lw cache.ListerWatcher, obj runtime.Object, changed func()) (cache.Store, watcher) {
	store := &notifyingStore{Store: cache.NewStore(cache.DeletionHandlingMetaNamespaceKeyFunc), changed: changed}
	backoff := watchBackoff
	keeping := newErrorKeepingLW(lw)
	r := cache.NewReflectorWithOptions(keeping, obj, store, cache.ReflectorOptions{Backoff: &backoff})
	return store, &reflectorWatch{reflector: r, store: store, lw: keeping}
}

func (w *reflectorWatch) RunWithContext(ctx context.Context) { w.reflector.RunWithContext(ctx) }

func (w *reflectorWatch) ListErr() error {
	if p := w.lw.listErr.Load(); p != nil {
		return *p
	}
	return nil
}

// errorKeepingLW keeps why the last list failed: a reflector only logs it and
// retries, and whoever waits for the first list (the node agent's publish) must be
// able to say why it is not coming, a Secret the pod may not read, say.
type errorKeepingLW struct {
	// ListerWatcher is the wrapped one, for the reflector's older interface; the
	// reflector calls the context methods.
	cache.ListerWatcher
	inner   cache.ListerWatcherWithContext
	listErr atomic.Pointer[error]
}

func newErrorKeepingLW(lw cache.ListerWatcher) *errorKeepingLW {
	return &errorKeepingLW{ListerWatcher: lw, inner: cache.ToListerWatcherWithContext(lw)}
}

// IsWatchListSemanticsUnSupported passes on what the wrapped client says: a client
// that cannot stream a watch list (a fake) must not be asked to.
func (l *errorKeepingLW) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(l.ListerWatcher)
}

func (l *errorKeepingLW) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	obj, err := l.inner.ListWithContext(ctx, options)
	l.listErr.Store(&err)
	return obj, err
}

func (l *errorKeepingLW) WatchWithContext(ctx context.Context, options metav1.ListOptions) (apiwatch.Interface, error) {
	return l.inner.WatchWithContext(ctx, options)
}

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
