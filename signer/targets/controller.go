package targets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/sidecar/contract"
	"github.com/trustsync/trustsync/sidecar/render"
	"github.com/trustsync/trustsync/sidecar/watch"
)

// FieldManager is the controller's name in the written objects' managedFields: it owns
// the keys it writes and the TargetLabel, nothing else.
const FieldManager = "trustsync-targets"

// TargetLabel, on a written ConfigMap or Secret, names the TrustTarget that writes it:
// one target per object, so two targets naming the same object conflict on it, and
// the controller finds what it wrote without watching every object of the cluster.
const TargetLabel = "trustsync.io/target"

// Config is what the controller needs.
type Config struct {
	Client   kubernetes.Interface
	Dynamic  dynamic.Interface
	Registry *watch.Registry
	Events   record.EventRecorder
	// Secrets allows Secret targets: writing (and so watching) Secrets in every
	// namespace, which the chart grants only when asked to.
	Secrets bool
	Resync  time.Duration
}

// Controller keeps every TrustTarget's objects current.
type Controller struct {
	cfg        Config
	queue      workqueue.TypedRateLimitingInterface[string]
	targets    cache.SharedIndexInformer
	namespaces corelisters.NamespaceLister
	configMaps corelisters.ConfigMapLister
	secrets    corelisters.SecretLister
	synced     []cache.InformerSynced
	start      func(context.Context)

	mu    sync.Mutex
	state map[string]*watched // per target, between reconciles
}

// New sets up the informers; Run starts them.
func New(cfg Config) *Controller {
	c := &Controller{cfg: cfg, state: map[string]*watched{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "trustsync_targets"})}
	dyn := dynamicinformer.NewDynamicSharedInformerFactory(cfg.Dynamic, cfg.Resync)
	c.targets = dyn.ForResource(Resource).Informer()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, _ = c.targets.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) }, DeleteFunc: enqueue})

	all := informers.NewSharedInformerFactory(cfg.Client, cfg.Resync)
	ns := all.Core().V1().Namespaces()
	c.namespaces = ns.Lister()
	_, _ = ns.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueueAll() },
		UpdateFunc: func(o, n any) { c.namespaceChanged(o, n) },
		DeleteFunc: func(any) { c.enqueueAll() },
	})
	// Only what the controller wrote: the objects carrying its label.
	written := informers.NewSharedInformerFactoryWithOptions(cfg.Client, cfg.Resync, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = TargetLabel }))
	byTarget := func(obj any) {
		if m, err := metaOf(obj); err == nil {
			c.queue.Add(m.GetLabels()[TargetLabel])
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: byTarget, UpdateFunc: func(_, n any) { byTarget(n) }, DeleteFunc: byTarget}
	cms := written.Core().V1().ConfigMaps()
	c.configMaps = cms.Lister()
	_, _ = cms.Informer().AddEventHandler(handler)
	c.synced = []cache.InformerSynced{c.targets.HasSynced, ns.Informer().HasSynced, cms.Informer().HasSynced}
	if cfg.Secrets {
		sec := written.Core().V1().Secrets()
		c.secrets = sec.Lister()
		_, _ = sec.Informer().AddEventHandler(handler)
		c.synced = append(c.synced, sec.Informer().HasSynced)
	}
	c.start = func(ctx context.Context) {
		dyn.Start(ctx.Done())
		all.Start(ctx.Done())
		written.Start(ctx.Done())
	}
	return c
}

// Run reconciles until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	c.start(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	klog.InfoS("TrustTarget controller running", "secrets", c.cfg.Secrets)
	for range workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) { work(ctx, c.queue, Kind, c.reconcile) }, time.Second)
	}
	<-ctx.Done()
	c.mu.Lock()
	for _, st := range c.state {
		st.close()
	}
	c.mu.Unlock()
}

func (c *Controller) enqueueAll() {
	for _, obj := range c.targets.GetStore().List() {
		if m, err := meta.Accessor(obj); err == nil {
			c.queue.Add(m.GetName())
		}
	}
}

// namespaceChanged enqueues every target when a namespace's labels changed (it may be
// selected now, or no more) or it began terminating.
func (c *Controller) namespaceChanged(o, n any) {
	old, ok1 := o.(*corev1.Namespace)
	cur, ok2 := n.(*corev1.Namespace)
	if !ok1 || !ok2 || !maps.Equal(old.Labels, cur.Labels) || old.Status.Phase != cur.Status.Phase {
		c.enqueueAll()
	}
}

// reconcile writes target name's object into every selected namespace and takes it
// out of the others.
func (c *Controller) reconcile(ctx context.Context, name string) (time.Duration, error) {
	obj, exists, err := c.targets.GetStore().GetByKey(name)
	if err != nil {
		return 0, err
	}
	if !exists {
		c.forget(name)
		return 0, c.releaseAll(ctx, name, nil)
	}
	u := obj.(*unstructured.Unstructured)
	t, err := FromUnstructured(u)
	if err != nil {
		return 0, c.setStatus(ctx, u, Status{}, "InvalidSpec", err.Error(), false)
	}
	if errs := t.Spec.Validate(); len(errs) > 0 {
		msg := errs.ToAggregate().Error()
		c.cfg.Events.Event(u, corev1.EventTypeWarning, "InvalidSpec", msg)
		return 0, c.setStatus(ctx, u, Status{}, "InvalidSpec", msg, false)
	}
	kind := "ConfigMap"
	if t.Spec.Target.Secret != nil {
		kind = "Secret"
		if !c.cfg.Secrets {
			msg := "Secret targets are not allowed here: writing Secrets means the controller may read and write every Secret of every namespace; the chart grants it with targets.secrets: true (docs/targets.md). Use a configMap target for public trust anchors"
			c.cfg.Events.Event(u, corev1.EventTypeWarning, "SecretsNotAllowed", msg)
			return 0, c.setStatus(ctx, u, Status{}, "SecretsNotAllowed", msg, false)
		}
	}
	st, err := c.stateFor(ctx, name, t.Spec)
	if err != nil {
		return 0, err
	}
	if !st.set.HasSynced() {
		return time.Second, nil
	}

	r := st.render()
	data, binary := payload(t.Spec.Sources, r)

	selector := labels.Everything()
	if ns := t.Spec.Target.NamespaceSelector; ns != nil {
		if selector, err = metav1.LabelSelectorAsSelector(ns); err != nil {
			return 0, err
		}
	}
	all, err := c.namespaces.List(labels.Everything())
	if err != nil {
		return 0, err
	}
	status := Status{}
	selected := map[string]bool{}
	for _, ns := range all {
		if ns.Status.Phase == corev1.NamespaceTerminating || !selector.Matches(labels.Set(ns.Labels)) {
			continue
		}
		selected[ns.Name] = true
		status.Namespaces++
		if len(data)+len(binary) == 0 {
			continue
		}
		if err := c.apply(ctx, kind, ns.Name, targetName(t), name, data, binary); err != nil {
			if len(status.Failures) < 10 {
				status.Failures = append(status.Failures, Failure{Namespace: ns.Name, Message: err.Error()})
			}
			continue
		}
		status.Synced++
	}
	if err := c.releaseAll(ctx, name, selected); err != nil {
		return 0, err
	}

	reason, msg, ok := "Synced", fmt.Sprintf("%s %s holds the current anchors in %d of %d selected namespaces", kind, targetName(t), status.Synced, status.Namespaces), true
	switch {
	case r.Err() != nil && len(data)+len(binary) == 0:
		reason, msg, ok = "SourceMissing", "nothing written: "+r.Err().Error(), false
	case r.Err() != nil:
		reason, msg, ok = "SourceMissing", msg+"; kept the last good content of: "+r.Err().Error(), false
	case status.Namespaces == 0:
		reason, msg = "NoNamespaces", "the namespace selector matches no namespace"
	case len(status.Failures) > 0:
		reason, msg, ok = "WriteFailed", fmt.Sprintf("%s; %d namespaces failed, first %s: %s", msg, status.Namespaces-status.Synced, status.Failures[0].Namespace, status.Failures[0].Message), false
	}
	return 0, c.setStatus(ctx, u, status, reason, msg, ok)
}

// payload splits a rendering's files into text keys (PEM) and binary keys
// (truststores).
func payload(sources []contract.Source, r *render.Rendering) (data map[string]string, binary map[string][]byte) {
	data, binary = map[string]string{}, map[string][]byte{}
	for _, src := range sources {
		f, ok := r.Files[src.Path]
		if !ok {
			continue
		}
		if src.FileFormat() == contract.FormatPEM {
			data[src.Path] = string(f.Data)
		} else {
			binary[src.Path] = f.Data
		}
	}
	return data, binary
}

func targetName(t *TrustTarget) string {
	if t.Spec.Target.Secret != nil {
		return t.Spec.Target.Secret.Name
	}
	return t.Spec.Target.ConfigMap.Name
}

// stateFor returns the target's plan and watches, made anew when its spec changed.
func (c *Controller) stateFor(ctx context.Context, name string, spec Spec) (*watched, error) {
	raw, _ := json.Marshal(spec)
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.state[name]; ok && st.spec == string(raw) {
		return st, nil
	}
	if st, ok := c.state[name]; ok {
		st.close()
		delete(c.state, name)
	}
	st, err := watchSources(ctx, c.cfg.Registry, string(raw), spec.Sources, func() { c.queue.Add(name) })
	if err != nil {
		return nil, err
	}
	c.state[name] = st
	return st, nil
}

func (c *Controller) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.state[name]; ok {
		st.close()
		delete(c.state, name)
	}
}

// apply writes the target's keys into namespace's object with server-side apply,
// without force: a key another manager owns is a conflict, reported, never taken.
func (c *Controller) apply(ctx context.Context, kind, namespace, object, target string, data map[string]string, binary map[string][]byte) error {
	err := applyData(ctx, c.cfg.Client, kind == "Secret", namespace, object, FieldManager, map[string]string{TargetLabel: target}, data, binary)
	if apierrors.IsConflict(err) {
		return fmt.Errorf("%s %s/%s: another manager owns a field this target writes, which is left as it is: %s; choose another key (the source's path) or object name, or remove that field", kind, namespace, object, conflictDetail(err))
	}
	if err != nil {
		return fmt.Errorf("%s %s/%s: %w", kind, namespace, object, err)
	}
	return nil
}

// applyData applies the keys (and labels) to a ConfigMap, or a Secret, as manager,
// without force: PEM as text data, truststores as binary (a Secret's are all bytes).
func applyData(ctx context.Context, client kubernetes.Interface, secret bool, namespace, name, manager string, labels, data map[string]string, binary map[string][]byte) error {
	opts := metav1.ApplyOptions{FieldManager: manager}
	if secret {
		cfg := applycorev1.Secret(name, namespace).WithData(binaryOf(data, binary))
		if len(labels) > 0 {
			cfg.WithLabels(labels)
		}
		_, err := client.CoreV1().Secrets(namespace).Apply(ctx, cfg, opts)
		return err
	}
	cfg := applycorev1.ConfigMap(name, namespace)
	if len(labels) > 0 {
		cfg.WithLabels(labels)
	}
	if len(data) > 0 {
		cfg.WithData(data)
	}
	if len(binary) > 0 {
		cfg.WithBinaryData(binary)
	}
	_, err := client.CoreV1().ConfigMaps(namespace).Apply(ctx, cfg, opts)
	return err
}

func binaryOf(data map[string]string, binary map[string][]byte) map[string][]byte {
	out := maps.Clone(binary)
	for k, v := range data {
		out[k] = []byte(v)
	}
	return out
}

// conflictDetail is the API server's list of conflicting fields and their managers.
func conflictDetail(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		var parts []string
		for _, cause := range status.Status().Details.Causes {
			parts = append(parts, cause.Message)
		}
		if len(parts) > 0 {
			return strings.Join(parts, "; ")
		}
	}
	return err.Error()
}

// releaseAll takes target's keys and label out of every object it wrote in a
// namespace not in keep (all of them when keep is nil), and deletes an object left
// empty, which the target made.
func (c *Controller) releaseAll(ctx context.Context, target string, keep map[string]bool) error {
	sel := labels.SelectorFromSet(labels.Set{TargetLabel: target})
	var errs []error
	cms, err := c.configMaps.List(sel)
	if err != nil {
		return err
	}
	for _, cm := range cms {
		if keep[cm.Namespace] {
			continue
		}
		errs = append(errs, c.release(ctx, "ConfigMap", cm.Namespace, cm.Name))
	}
	if c.secrets != nil {
		secs, err := c.secrets.List(sel)
		if err != nil {
			return err
		}
		for _, s := range secs {
			if !keep[s.Namespace] {
				errs = append(errs, c.release(ctx, "Secret", s.Namespace, s.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// release applies an empty configuration: the API server removes every field only
// this manager owned; then an object with nothing left in it goes.
func (c *Controller) release(ctx context.Context, kind, namespace, name string) error {
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	var left int
	var rv string
	if kind == "Secret" {
		s, err := c.cfg.Client.CoreV1().Secrets(namespace).Apply(ctx, applycorev1.Secret(name, namespace), opts)
		if err != nil {
			return ignoreNotFound(err)
		}
		left, rv = len(s.Data)+len(s.StringData)+len(s.Labels)+len(s.Annotations), s.ResourceVersion
	} else {
		cm, err := c.cfg.Client.CoreV1().ConfigMaps(namespace).Apply(ctx, applycorev1.ConfigMap(name, namespace), opts)
		if err != nil {
			return ignoreNotFound(err)
		}
		left, rv = len(cm.Data)+len(cm.BinaryData)+len(cm.Labels)+len(cm.Annotations), cm.ResourceVersion
	}
	if left > 0 {
		return nil
	}
	del := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}
	var err error
	if kind == "Secret" {
		err = c.cfg.Client.CoreV1().Secrets(namespace).Delete(ctx, name, del)
	} else {
		err = c.cfg.Client.CoreV1().ConfigMaps(namespace).Delete(ctx, name, del)
	}
	if apierrors.IsConflict(err) {
		return nil // someone wrote to it meanwhile: it is theirs now
	}
	return ignoreNotFound(err)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// setStatus records the status and the Ready condition, and an Event when Ready
// changed.
func (c *Controller) setStatus(ctx context.Context, u *unstructured.Unstructured, status Status, reason, message string, ready bool) error {
	old, _ := FromUnstructured(u)
	status.ObservedGeneration = u.GetGeneration()
	cond := metav1.Condition{Type: Ready, Status: metav1.ConditionFalse, Reason: reason, Message: message, ObservedGeneration: u.GetGeneration()}
	if ready {
		cond.Status = metav1.ConditionTrue
	}
	if old != nil {
		status.Conditions = slices.Clone(old.Status.Conditions)
	}
	changed := meta.SetStatusCondition(&status.Conditions, cond)
	if old != nil && equalStatus(old.Status, status) {
		return nil
	}
	if changed {
		typ := corev1.EventTypeNormal
		if !ready && reason != "NoNamespaces" {
			typ = corev1.EventTypeWarning
		}
		c.cfg.Events.Event(u, typ, reason, message)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
	if err != nil {
		return err
	}
	updated := u.DeepCopy()
	updated.Object["status"] = m
	_, err = c.cfg.Dynamic.Resource(Resource).UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: FieldManager})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // a newer version is queued already
	}
	return err
}

func equalStatus(a, b Status) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
