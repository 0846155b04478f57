package inject

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// injectedIndex is what the Filler has filled, published as one ConfigMap
// (v1alpha1.InjectedIndex): the node agent learns from it which ConfigMaps and
// Secrets pods read trust from, and the signer what each annotated object holds, so
// that neither needs a right to read those objects. Filled objects are recorded as
// they are written and published together, at most once a second.
type injectedIndex struct {
	client kubernetes.Interface
	ref    types.NamespacedName

	mu      sync.Mutex
	objects map[string]v1alpha1.InjectedObject // by the Filler's key
	changed chan struct{}
	written string
}

func newInjectedIndex(client kubernetes.Interface, ref types.NamespacedName) *injectedIndex {
	return &injectedIndex{client: client, ref: ref, objects: map[string]v1alpha1.InjectedObject{}, changed: make(chan struct{}, 1)}
}

// seed reads what the index held before a start: those entries stand until their
// objects are filled again (keep) or found gone, so that a restart never publishes
// an index missing objects it has not reached yet (the agent would stop observing
// their readers, and a rotation stop waiting for them).
func (x *injectedIndex) seed(ctx context.Context, keyOf func(v1alpha1.InjectedObject) (string, bool)) error {
	cm, err := x.client.CoreV1().ConfigMaps(x.ref.Namespace).Get(ctx, x.ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.written = cm.Data[v1alpha1.InjectedIndexKey]
	if x.written == "" {
		return nil // as the chart creates it: nothing listed yet
	}
	idx, err := v1alpha1.ParseInjectedIndex(x.written)
	if err != nil {
		klog.InfoS("The injected index does not read; it is written again from the objects", "configMap", x.ref, "err", err)
		return nil
	}
	for _, o := range idx.Objects {
		if key, ok := keyOf(o); ok {
			x.objects[key] = o
		}
	}
	return nil
}

// keepOnly drops the entries of objects that no longer ask (after the first list).
func (x *injectedIndex) keepOnly(asking func(key string) bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for key := range x.objects {
		if !asking(key) {
			delete(x.objects, key)
		}
	}
	x.notify()
}

func (x *injectedIndex) set(key string, o v1alpha1.InjectedObject) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.objects[key] = o
	x.notify()
}

func (x *injectedIndex) forget(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.objects[key]; ok {
		delete(x.objects, key)
		x.notify()
	}
}

// notify marks the index changed; x.mu is held.
func (x *injectedIndex) notify() {
	select {
	case x.changed <- struct{}{}:
	default:
	}
}

// run publishes the index when it changes, at most once every interval; a failed
// write is tried again at the next.
func (x *injectedIndex) run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	pending := true
	for {
		if pending {
			pending = x.publish(ctx) != nil
		}
		select {
		case <-ctx.Done():
			return
		case <-x.changed:
			pending = true
			select { // one write for a burst of changes
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		case <-tick.C:
		}
	}
}

func (x *injectedIndex) publish(ctx context.Context) error {
	x.mu.Lock()
	objects := make([]v1alpha1.InjectedObject, 0, len(x.objects))
	for _, o := range x.objects {
		objects = append(objects, o)
	}
	written := x.written
	x.mu.Unlock()
	data, omitted := v1alpha1.EncodeInjectedIndex(objects)
	if data == written {
		return nil
	}
	if omitted > 0 {
		klog.InfoS("The injected index is full: some filled objects are not listed, their readers are not observed, and a rotation waits its floor for them", "configMap", x.ref, "omitted", omitted)
	}
	cm := corev1ac.ConfigMap(x.ref.Name, x.ref.Namespace).
		WithLabels(map[string]string{v1alpha1.InjectedIndexLabel: "true"}).
		WithData(map[string]string{v1alpha1.InjectedIndexKey: data})
	if _, err := x.client.CoreV1().ConfigMaps(x.ref.Namespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: InjectFieldManager, Force: true}); err != nil {
		klog.ErrorS(err, "Cannot publish the injected index; tried again in a moment", "configMap", x.ref)
		return err
	}
	x.mu.Lock()
	x.written = data
	x.mu.Unlock()
	return nil
}
