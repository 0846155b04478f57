package watch

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/trustsync/trustsync/test/poll"
)

// Every change the watch delivers asks for a sync, and the watch counts as synced
// only once its first list reached the store.
func TestReflectorWatch_AsksForASyncOnEveryChange(t *testing.T) {
	fw := watch.NewFake()
	listing, listed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			once.Do(func() { close(listing) })
			<-listed
			return &certificatesv1.ClusterTrustBundleList{ListMeta: metav1.ListMeta{ResourceVersion: "1"},
				Items: []certificatesv1.ClusterTrustBundle{{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "1"}}}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil },
	}
	var changes atomic.Int32
	store, w := newReflectorWatch(plainListWatch{lw}, &certificatesv1.ClusterTrustBundle{}, func() { changes.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.RunWithContext(ctx)

	// The reflector is inside its first list, which has not returned.
	select {
	case <-listing:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch never listed")
	}
	if w.HasSynced() {
		t.Fatal("synced before the first list")
	}
	close(listed)
	poll.True(t, 10*time.Second, "the first list", func() bool { return w.HasSynced() && changes.Load() == 1 && len(store.List()) == 1 })

	b := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "b", ResourceVersion: "2"}}
	fw.Add(b)
	poll.True(t, 10*time.Second, "an added bundle", func() bool { return changes.Load() == 2 && len(store.List()) == 2 })
	b2 := b.DeepCopy()
	b2.ResourceVersion = "3"
	fw.Modify(b2)
	poll.True(t, 10*time.Second, "a modified bundle", func() bool { return changes.Load() == 3 })
	fw.Delete(b2)
	poll.True(t, 10*time.Second, "a deleted bundle", func() bool { return changes.Load() == 4 && len(store.List()) == 1 })
}

// plainListWatch lists then watches: the fake watch sends no initial events, so the
// streaming list the reflector would try first is off.
type plainListWatch struct{ *cache.ListWatch }

func (plainListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// The watch's retry waits stay within a few seconds, so a sidecar is back soon after
// the API server, while spreading (jitter) so that pods do not return in step.
func TestWatchBackoff_StaysWithinSecondsAndSpreads(t *testing.T) {
	var lo, hi time.Duration = time.Hour, 0
	for range 200 {
		b := watchBackoff
		var d time.Duration
		for range 10 { // a long outage: past the cap
			d = b.Step()
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	if hi > 8*time.Second {
		t.Errorf("a retry waits up to %s after a long outage; want at most 8 s", hi)
	}
	if hi-lo < 2*time.Second {
		t.Errorf("retries after a long outage span only [%s, %s]; want them spread", lo, hi)
	}
}
