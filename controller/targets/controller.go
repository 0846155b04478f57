// Package targets is the TrustTarget controller: each target's object written into
// every namespace it selects and is granted, only what changed applied, the rest
// released, and a Ready condition that says how it went. One object has one writer:
// the first target to claim it (claims.go); the object writer is controller/objects.
package targets

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/controller/objects"
	"github.com/trustsync/trustsync/controller/readystatus"
	"github.com/trustsync/trustsync/delivery/render"
	"github.com/trustsync/trustsync/delivery/watch"
	"github.com/trustsync/trustsync/kubeapi/queue"
)

// FieldManager is the controller's name in the written objects' managedFields: it owns
// the keys it writes and the TargetLabel, nothing else.
const FieldManager = "trustsync-targets"

// Config is what the controller needs.
type Config struct {
	Client   kubernetes.Interface
	Dynamic  dynamic.Interface
	Registry *watch.Registry
	Events   record.EventRecorder
	// Secrets allows Secret targets: writing (and so watching) Secrets in every
	// namespace, which the chart grants only when asked to; SecretNames, when set,
	// are the only names it may write (and watches, one watch each, through Metadata
	// for their metadata).
	Secrets     bool
	SecretNames []string
	Metadata    metadata.Interface
	Resync      time.Duration
	Metrics     *objects.Metrics
	// ObjectMeta, when set, is the metadata-only watches the injection shares: the
	// controller reads from them whether an object it has not written exists,
	// instead of asking the API server.
	ObjectMeta *objects.ObjectMeta
	// Tenancy, when enforced, skips the namespaces not granted every source.
	Tenancy objects.Tenancy
}

// Controller keeps every TrustTarget's objects current.
type Controller struct {
	cfg        Config
	queue      workqueue.TypedRateLimitingInterface[string]
	targets    cache.SharedIndexInformer
	namespaces corelisters.NamespaceLister
	configMaps corelisters.ConfigMapLister
	secrets    objects.SecretListers // none: Secrets are not allowed
	synced     []cache.InformerSynced
	start      func(context.Context)
	// metadata lists every object of a kind, metadata only, where ObjectMeta is set.
	metadata map[objects.Kind]cache.GenericLister

	state  *objects.Tended // per target, between reconciles
	claims claimCache
	status readystatus.Writer
	// echoes are the controller's own writes (objects and statuses), whose events
	// change nothing the reconcile that made them did not know.
	echoes objects.Echoes
}

// New sets up the informers; Run starts them.
func New(cfg Config) *Controller {
	c := &Controller{cfg: cfg,
		queue: queue.New[string]("trustsync_targets")}
	c.state = objects.NewTended(cfg.Registry, func(name string) { c.queue.Add(name) })
	c.status = readystatus.Writer{Dynamic: cfg.Dynamic, Resource: v1alpha1.TrustTargetResource, FieldManager: FieldManager, Events: cfg.Events,
		Echoes: &c.echoes, Requeue: func(name string) { c.queue.Add(name) }}
	dyn := dynamicinformer.NewDynamicSharedInformerFactory(cfg.Dynamic, cfg.Resync)
	c.targets = dyn.ForResource(v1alpha1.TrustTargetResource).Informer()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	// A target that comes, goes or changes its spec may claim (or let go of) an
	// object other targets name: it and they look again, no other. A status update
	// concerns only its own target, and the controller's own status write none.
	_, _ = c.targets.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueClaimants(obj) },
		UpdateFunc: func(o, n any) {
			om, nm, err := metaPair(o, n)
			if err == nil && om.GetGeneration() == nm.GetGeneration() {
				if !c.echoes.Echo(c.status.StatusKey(nm.GetName()), nm.GetResourceVersion()) {
					enqueue(n)
				}
				return
			}
			c.enqueueClaimants(o, n)
		},
		DeleteFunc: func(obj any) { c.enqueueClaimants(obj) },
	})

	all := informers.NewSharedInformerFactory(cfg.Client, cfg.Resync)
	ns := all.Core().V1().Namespaces()
	c.namespaces = ns.Lister()
	// A namespace concerns only the targets that select it: a new one under 1,000
	// targets costs a reconcile of those whose selector picks it, not of all.
	_, _ = ns.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueSelecting(obj) },
		UpdateFunc: func(o, n any) { c.namespaceChanged(o, n) },
		DeleteFunc: func(obj any) { c.enqueueSelecting(obj) },
	})
	// Only what the controller wrote: the objects carrying its label.
	written := informers.NewSharedInformerFactoryWithOptions(cfg.Client, cfg.Resync, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = v1alpha1.TargetLabel }))
	byTarget := func(obj any) {
		if m, err := objects.MetaOf(obj); err == nil {
			c.queue.Add(m.GetLabels()[v1alpha1.TargetLabel])
		}
	}
	// An object as the controller wrote it is no news to the target that wrote it.
	unlessEcho := func(kind objects.Kind) func(any) {
		return func(obj any) {
			if m, err := objects.MetaOf(obj); err == nil && c.echoes.Echo(objectKey(kind, m.GetNamespace(), m.GetName()), m.GetResourceVersion()) {
				return
			}
			byTarget(obj)
		}
	}
	handler := func(kind objects.Kind) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{AddFunc: unlessEcho(kind), UpdateFunc: func(_, n any) { unlessEcho(kind)(n) }, DeleteFunc: byTarget}
	}
	cms := written.Core().V1().ConfigMaps()
	c.configMaps = cms.Lister()
	_, _ = cms.Informer().AddEventHandler(handler(objects.ConfigMap))
	c.synced = []cache.InformerSynced{c.targets.HasSynced, ns.Informer().HasSynced, cms.Informer().HasSynced}
	var starts []func(<-chan struct{})
	if cfg.Secrets {
		listers, infs, more := objects.WrittenSecrets(cfg.Client, cfg.Resync, cfg.SecretNames, func(o *metav1.ListOptions) { o.LabelSelector = v1alpha1.TargetLabel })
		c.secrets, starts = listers, append(starts, more...)
		for _, inf := range infs {
			_, _ = inf.AddEventHandler(handler(objects.Secret))
			c.synced = append(c.synced, inf.HasSynced)
		}
	}
	c.metadata = map[objects.Kind]cache.GenericLister{}
	if cfg.ObjectMeta != nil {
		kinds := map[objects.Kind][]informers.GenericInformer{objects.ConfigMap: {cfg.ObjectMeta.For(objects.ConfigMap)}}
		if cfg.Secrets {
			kinds[objects.Secret] = cfg.ObjectMeta.Secrets()
		}
		for kind, infs := range kinds {
			var listers objects.GenericListers
			for _, informer := range infs {
				listers = append(listers, informer.Lister())
				c.synced = append(c.synced, informer.Informer().HasSynced)
				// Another tool's object where a target writes (a conflict) may go or
				// change hands: the targets writing that name look again now, not
				// at the next resync.
				_, _ = informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
					UpdateFunc: func(_, n any) { c.enqueueWriters(kind, n) },
					DeleteFunc: func(o any) { c.enqueueWriters(kind, o) },
				})
			}
			c.metadata[kind] = listers
		}
	}
	c.start = func(ctx context.Context) {
		dyn.Start(ctx.Done())
		all.Start(ctx.Done())
		written.Start(ctx.Done())
		if cfg.ObjectMeta != nil {
			cfg.ObjectMeta.Start(ctx.Done())
		}
		for _, start := range starts {
			start(ctx.Done())
		}
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
	queue.Work(ctx, c.queue, workers, v1alpha1.TrustTargetKind, c.reconcile)
	<-ctx.Done()
	c.state.CloseAll()
}

func metaPair(o, n any) (metav1.Object, metav1.Object, error) {
	om, err := meta.Accessor(o)
	if err != nil {
		return nil, nil, err
	}
	nm, err := meta.Accessor(n)
	return om, nm, err
}

// EnqueueAll looks at every target again: what a namespace is granted changed.
func (c *Controller) EnqueueAll() { c.enqueueAll() }

func (c *Controller) enqueueAll() {
	for _, obj := range c.targets.GetStore().List() {
		if m, err := meta.Accessor(obj); err == nil {
			c.queue.Add(m.GetName())
		}
	}
}

// enqueueClaimants enqueues the targets that are objs (a target's old and new
// versions), and every target naming the same object in a namespace one of them
// selects: claims on one object are settled among the targets that claim it in the
// same namespace (claims.go), and no other target's objects change with them. A
// thousand teams' targets each writing "roots" into their own namespaces are not
// looked at when one of them comes or goes.
func (c *Controller) enqueueClaimants(objs ...any) {
	claimed := c.claims.claims(c.targets.GetStore().List(), c.permitsSecret)
	namespaces, err := c.namespaces.List(labels.Everything())
	if err != nil {
		c.enqueueAll()
		return
	}
	for _, obj := range objs {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			c.enqueueAll()
			return
		}
		c.queue.Add(u.GetName())
		cl, ok := claimOf(u, c.permitsSecret)
		if !ok {
			continue
		}
		others := claimed[objectName{cl.kind, cl.object}]
		for _, ns := range namespaces {
			set := labels.Set(ns.Labels)
			if !cl.selector.Matches(set) {
				continue
			}
			for _, other := range others {
				if other.selector.Matches(set) {
					c.queue.Add(other.target)
				}
			}
		}
	}
}

// namespaceChanged enqueues the targets that selected the namespace or select it now,
// when its labels changed (it may be selected now, or no more) or it began
// terminating.
func (c *Controller) namespaceChanged(o, n any) {
	old, ok1 := o.(*corev1.Namespace)
	cur, ok2 := n.(*corev1.Namespace)
	if !ok1 || !ok2 || !maps.Equal(old.Labels, cur.Labels) || old.Status.Phase != cur.Status.Phase {
		c.enqueueSelecting(o, n)
	}
}

// enqueueSelecting enqueues the targets whose namespace selector picks one of the
// namespaces; every target when one is not a namespace (a deletion's tombstone). A
// target that claims nothing (an invalid spec, a Secret it may not write) says so in
// its status whatever the namespaces are.
func (c *Controller) enqueueSelecting(objs ...any) {
	var sets []labels.Labels
	for _, obj := range objs {
		ns, ok := obj.(*corev1.Namespace)
		if !ok {
			c.enqueueAll()
			return
		}
		sets = append(sets, labels.Set(ns.Labels))
	}
	for _, cls := range c.claims.claims(c.targets.GetStore().List(), c.permitsSecret) {
		for _, cl := range cls {
			if slices.ContainsFunc(sets, cl.selector.Matches) {
				c.queue.Add(cl.target)
			}
		}
	}
}

// reconcile writes target name's object into every selected namespace and takes it
// out of the others, in flat steps: a target gone gives everything back; a spec that
// cannot be written says why; the sources rendered; every selected namespace written;
// the rest released; the status says how it went.
func (c *Controller) reconcile(ctx context.Context, name string) (time.Duration, error) {
	c.cfg.Metrics.Reconciled("targets")
	obj, exists, err := c.targets.GetStore().GetByKey(name)
	if err != nil {
		return 0, err
	}
	if !exists {
		c.state.Forget(name)
		c.cfg.Metrics.TargetGone(name)
		return 0, c.releaseAll(ctx, name, nil, c.claims.claims(c.targets.GetStore().List(), c.permitsSecret))
	}
	u := obj.(*unstructured.Unstructured)
	t, spec, refused := c.admit(u)
	if refused != nil {
		return 0, c.setStatus(ctx, u, v1alpha1.TrustTargetStatus{}, *refused)
	}
	st, err := c.state.Get(ctx, name, objects.SpecKey(t.Spec), spec.Sources)
	if err != nil {
		return 0, err
	}
	if !st.Set.HasSynced() {
		return time.Second, nil
	}
	r := c.render(st, name, spec)
	claimed := c.claims.claims(c.targets.GetStore().List(), c.permitsSecret)
	out, err := c.writeSelected(ctx, st, t, spec, r, claimed)
	if err != nil {
		return 0, err
	}
	if err := c.releaseAll(ctx, name, func(k objects.Kind, namespace, obj string) bool {
		return k == objects.KindNamed(spec.Kind) && obj == spec.Name && out.selected[namespace]
	}, claimed); err != nil {
		return 0, err
	}
	if err := c.setStatus(ctx, u, out.status, out.ready(spec, r.Err())); err != nil {
		return 0, err
	}
	// A write the API server refused is tried again with the queue's backoff, as
	// trust-manager does: the next try must not wait for an unrelated event or the
	// resync. What no retry can mend (a conflict of claims, an object too large)
	// waits for a change instead.
	if out.retry > 0 {
		return 0, fmt.Errorf("%d of %d namespaces not written, retrying: %s", out.retry, out.status.Namespaces, out.firstRetry)
	}
	return 0, nil
}

// admit parses u and checks that it may be written here; refused says why not (an
// Event is recorded with it).
func (c *Controller) admit(u *unstructured.Unstructured) (*v1alpha1.TrustTarget, *v1alpha1.ParsedTrustTargetSpec, *readystatus.Ready) {
	t, err := v1alpha1.TrustTargetFromUnstructured(u)
	if err != nil {
		return nil, nil, &readystatus.Ready{Reason: v1alpha1.ReasonInvalidSpec, Message: err.Error()}
	}
	spec, err := v1alpha1.ParseTrustTargetSpec(&t.Spec)
	refuse := func(reason, msg string) (*v1alpha1.TrustTarget, *v1alpha1.ParsedTrustTargetSpec, *readystatus.Ready) {
		c.cfg.Events.Event(u, corev1.EventTypeWarning, reason, msg)
		return nil, nil, &readystatus.Ready{Reason: reason, Message: msg}
	}
	switch {
	case err != nil:
		return refuse(v1alpha1.ReasonInvalidSpec, err.Error())
	case spec.Kind == v1alpha1.KindSecret && !c.cfg.Secrets:
		return refuse(v1alpha1.ReasonSecretsNotAllowed, "Secret targets are not allowed here: writing Secrets means the controller may read and write every Secret of every namespace; the chart grants it with targets.secrets: true (docs/targets.md). Use a configMap target for public trust anchors")
	case spec.Kind == v1alpha1.KindSecret && !c.permitsSecret(spec.Name):
		return refuse(v1alpha1.ReasonSecretNotAuthorized, objects.SecretNotAuthorized(spec.Name, c.cfg.SecretNames))
	}
	return t, spec, nil
}

// render renders the target's sources as the watches hold them. After a restart (or
// a spec change) there is no earlier rendering: the objects written before hold the
// last good content, and a source that fails now must keep it, not take its key away.
func (c *Controller) render(st *objects.Watched, target string, spec *v1alpha1.ParsedTrustTargetSpec) *render.Rendering {
	if st.Last == nil {
		if live := c.anyWritten(objects.KindNamed(spec.Kind), target, spec.Name); live != nil {
			st.Seed(live.Files(st.Plan.Paths()))
		}
	}
	return st.Render()
}

// tally is one reconcile's writes: the status they make, the namespaces
// selected (whose objects are kept), and how the others failed.
type tally struct {
	status   v1alpha1.TrustTargetStatus
	selected map[string]bool
	// shared names what this target writes that another claims too.
	shared             []string
	failed, conflicted int
	// retry counts the failures a later try may mend; firstRetry names the first.
	retry      int
	firstRetry string
}

// writeSelected brings the target's object up to date in every namespace it selects
// and is granted. An error is one that must leave everything as it is (the grants
// cannot be told): nothing is released on it.
func (c *Controller) writeSelected(ctx context.Context, st *objects.Watched, t *v1alpha1.TrustTarget, spec *v1alpha1.ParsedTrustTargetSpec, r *render.Rendering, claimed claimSet) (*tally, error) {
	all, err := c.namespaces.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := &tally{status: v1alpha1.TrustTargetStatus{Anchors: r.AnchorIDs()}, selected: map[string]bool{}}
	for _, ns := range all {
		if ns.Status.Phase == corev1.NamespaceTerminating || !spec.Namespaces.Matches(labels.Set(ns.Labels)) {
			continue
		}
		_, refused, err := c.cfg.Tenancy.Split(ctx, ns.Name, t.Spec.Sources)
		if err != nil {
			return nil, err
		}
		if refused != nil {
			// Not written, and what was written before is released: a grant
			// withdrawn takes the anchors away.
			out.notGranted(ns.Name, refused)
			continue
		}
		out.selected[ns.Name] = true
		written, note, err := c.write(ctx, st, ns, objects.KindNamed(spec.Kind), spec.Name, t.Name, t.Spec.Sources, r, claimed)
		out.wrote(ns.Name, written, note, err)
	}
	return out, nil
}

// maxNamed is how many namespaces a status names of those that failed, or were not
// granted.
const maxNamed = 10

func (out *tally) notGranted(namespace string, why error) {
	out.status.NotGranted++
	if len(out.status.NotGrantedNamespaces) < maxNamed {
		out.status.NotGrantedNamespaces = append(out.status.NotGrantedNamespaces, v1alpha1.NamespaceFailure{Namespace: namespace, Message: why.Error()})
	}
}

func (out *tally) wrote(namespace string, written bool, note string, err error) {
	out.status.Namespaces++
	if note != "" {
		out.shared = append(out.shared, note)
	}
	switch {
	case err != nil:
		out.failed++
		switch {
		case errors.As(err, new(*conflictError)):
			out.conflicted++
		case objects.Retryable(err):
			if out.retry == 0 {
				out.firstRetry = namespace + ": " + err.Error()
			}
			out.retry++
		}
		if len(out.status.Failures) < maxNamed {
			out.status.Failures = append(out.status.Failures, v1alpha1.NamespaceFailure{Namespace: namespace, Message: err.Error()})
		}
	case written:
		out.status.Synced++
	}
}

// ready is the Ready condition a reconcile that wrote out ends with; renderErr is
// why a source failed, if one did (its last good content is kept).
func (out *tally) ready(spec *v1alpha1.ParsedTrustTargetSpec, renderErr error) readystatus.Ready {
	status := out.status
	res := readystatus.Ready{Reason: v1alpha1.ReasonSynced, Message: fmt.Sprintf("%s %s holds the current anchors in %d of %d selected namespaces", spec.Kind, spec.Name, status.Synced, status.Namespaces), OK: true}
	switch {
	case renderErr != nil && status.Synced == 0 && out.failed == 0 && status.Namespaces > 0:
		res = readystatus.Ready{Reason: v1alpha1.ReasonSourceMissing, Message: "nothing written: " + renderErr.Error()}
	case renderErr != nil:
		res = readystatus.Ready{Reason: v1alpha1.ReasonSourceMissing, Message: res.Message + "; kept the last good content of: " + renderErr.Error()}
	case status.Namespaces == 0 && status.NotGranted > 0:
		first := status.NotGrantedNamespaces[0]
		res = readystatus.Ready{Reason: v1alpha1.ReasonNotGranted, Message: fmt.Sprintf("nothing written: none of the %d namespaces selected is granted every source (TrustPolicies), first %s: %s", status.NotGranted, first.Namespace, first.Message)}
	case status.Namespaces == 0:
		res = readystatus.Ready{Reason: v1alpha1.ReasonNoNamespaces, Message: "the namespace selector matches no namespace", OK: true}
	case len(out.shared) > 0:
		res = readystatus.Ready{Reason: v1alpha1.ReasonConflict, Message: fmt.Sprintf("%s; %s (in %d namespaces): one object has one writer, so name another object or narrow a namespace selector", res.Message, out.shared[0], len(out.shared))}
	case out.conflicted > 0:
		first := status.Failures[0]
		res = readystatus.Ready{Reason: v1alpha1.ReasonConflict, Message: fmt.Sprintf("%s; %d namespaces not written, first %s: %s", res.Message, out.failed, first.Namespace, first.Message)}
	case out.failed > 0:
		first := status.Failures[0]
		res = readystatus.Ready{Reason: v1alpha1.ReasonWriteFailed, Message: fmt.Sprintf("%s; %d namespaces failed, first %s: %s", res.Message, out.failed, first.Namespace, first.Message)}
	}
	if res.OK && status.NotGranted > 0 {
		first := status.NotGrantedNamespaces[0]
		res.Message = fmt.Sprintf("%s; %d more selected are not granted every source and are not written (status.notGrantedNamespaces), first %s: %s", res.Message, status.NotGranted, first.Namespace, first.Message)
	}
	return res
}

// conflictError is an object this target does not write because another claims it.
type conflictError struct{ msg string }

func (e *conflictError) Error() string { return e.msg }

// write brings target's object in namespace ns up to date, and says whether it holds
// the current content. note names another claimant of an object this target writes;
// an object another target (or an annotation) writes is left to it: an error.
func (c *Controller) write(ctx context.Context, st *objects.Watched, ns *corev1.Namespace, kind objects.Kind, object, target string, sources []v1alpha1.Source, r *render.Rendering, claimed claimSet) (ok bool, note string, err error) {
	live := c.written(kind, ns.Name, object)
	labelled := ""
	if live != nil {
		labelled = live.Meta.GetLabels()[v1alpha1.TargetLabel]
	}
	w, others := writer(claimed, ns, kind, object, labelled)
	if w != target {
		return false, "", &conflictError{fmt.Sprintf("%s %s/%s is written by TrustTarget %s, which claimed it first; one object has one writer: name another object, or narrow one of the namespace selectors", kind, ns.Name, object, w)}
	}
	if len(others) > 0 {
		note = fmt.Sprintf("TrustTarget %s also names %s %s/%s", strings.Join(others, ", "), kind, ns.Name, object)
	}

	data, binary := objects.Payload(sources, r)
	if err := objects.TooLarge(data, binary); err != nil {
		return false, note, err
	}
	d := objects.Desired{Data: data, Binary: binary, Labels: map[string]string{v1alpha1.TargetLabel: target}}
	last := st.Applied[ns.Name]
	if live != nil && live.Meta.GetResourceVersion() == last.After {
		// The informer has seen this controller's last write: what it holds is the
		// truth again (a later deletion is one, and is written anew).
		delete(st.Applied, ns.Name)
		last = objects.Applied{}
	}
	if live == nil {
		if last.Digest != "" && last.Before == "" && last.Digest == d.Digest() {
			return true, note, nil // created by this controller; the cache has yet to see it
		}
		fetched, err := c.unlabelled(ctx, kind, ns.Name, object, r.Err() != nil)
		if err != nil {
			return false, note, fmt.Errorf("%s %s/%s: %w", kind, ns.Name, object, err)
		}
		live = fetched
	}
	if live == nil {
		d.Annotations = map[string]string{v1alpha1.CreatedAnnotation: "true"}
	} else {
		if _, asks := live.Meta.GetAnnotations()[v1alpha1.AnnotationInject]; asks {
			if labelled != target {
				return false, note, &conflictError{fmt.Sprintf("%s %s/%s is annotated %s and filled by the annotations it carries; one object has one writer: remove the annotation, or name another object", kind, ns.Name, object, v1alpha1.AnnotationInject)}
			}
			note = fmt.Sprintf("%s %s/%s is also annotated %s, which is ignored while this target writes it", kind, ns.Name, object, v1alpha1.AnnotationInject)
		}
		if createdByTargets(live.Meta) {
			d.Annotations = map[string]string{v1alpha1.CreatedAnnotation: "true"}
		}
		objects.KeepHeld(sources, r, live, d.Data, d.Binary)
	}
	if len(d.Data)+len(d.Binary) == 0 {
		return false, note, nil // nothing to write yet: the status says why
	}
	if live != nil && live.Holds(d, FieldManager) {
		return true, note, nil
	}
	digest := d.Digest()
	if live != nil && last.Digest == digest && last.Before == live.Meta.GetResourceVersion() {
		return true, note, nil // the informer has yet to see this controller's write
	}
	key := objectKey(kind, ns.Name, object)
	c.echoes.Writing(key)
	rv, err := c.apply(ctx, kind, ns.Name, object, d)
	if c.echoes.Wrote(key, rv) {
		c.queue.Add(target) // someone else's change came while the write was in flight
	}
	if err != nil {
		return false, note, err
	}
	before := ""
	if live != nil {
		before = live.Meta.GetResourceVersion()
	}
	st.Applied[ns.Name] = objects.Applied{Digest: digest, Before: before, After: rv}
	return true, note, nil
}

// objectKey names an object the controller writes among its echoes (its targets'
// statuses are named by the status writer).
func objectKey(kind objects.Kind, namespace, name string) string {
	return kind.Name + "/" + namespace + "/" + name
}

// enqueueWriters queues the targets that write an object of kind named as obj is,
// where obj is not one the controller wrote (those come through their label).
func (c *Controller) enqueueWriters(kind objects.Kind, obj any) {
	m, err := objects.MetaOf(obj)
	if err != nil || m.GetLabels()[v1alpha1.TargetLabel] != "" {
		return
	}
	field := map[string]string{v1alpha1.KindConfigMap: "configMap", v1alpha1.KindSecret: "secret"}[kind.Name]
	for _, t := range c.targets.GetStore().List() {
		u, ok := t.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if name, _, _ := unstructured.NestedString(u.Object, "spec", "target", field, "name"); name == m.GetName() {
			c.queue.Add(u.GetName())
		}
	}
}

// permitsSecret says whether the Secret name may be written.
func (c *Controller) permitsSecret(name string) bool {
	return objects.PermitsSecret(c.cfg.Secrets, c.cfg.SecretNames, name)
}

// written is the object of kind in namespace as the informer holds it, if it carries
// the target label (the controller sees only what it wrote).
func (c *Controller) written(kind objects.Kind, namespace, name string) *objects.Object {
	var obj any
	var err error
	if kind == objects.Secret {
		if len(c.secrets) == 0 {
			return nil
		}
		obj, err = c.secrets.Get(namespace, name)
	} else {
		obj, err = c.configMaps.ConfigMaps(namespace).Get(name)
	}
	if err != nil {
		return nil
	}
	o, _ := objects.ObjectOf(obj)
	return &o
}

// unlabelled is an object of kind the targets' informers do not hold (no target
// label): nil when it does not exist. Every object's metadata is at hand (the
// metadata informer the injection shares), so only an object whose keys a failing
// source may need (whole) is read from the API server.
func (c *Controller) unlabelled(ctx context.Context, kind objects.Kind, namespace, name string, whole bool) (*objects.Object, error) {
	if lister := c.metadata[kind]; lister != nil && !whole {
		obj, err := lister.ByNamespace(namespace).Get(name)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		m, ok := obj.(*metav1.PartialObjectMetadata)
		if !ok {
			return nil, fmt.Errorf("the metadata informer held a %T", obj)
		}
		return &objects.Object{Meta: m, Secret: kind == objects.Secret}, nil
	}
	o, err := objects.GetObject(ctx, c.cfg.Client, kind, namespace, name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return o, err
}

// writtenBy is every object carrying target's label, as the informers hold them.
func (c *Controller) writtenBy(target string) ([]objects.Object, error) {
	sel := labels.SelectorFromSet(labels.Set{v1alpha1.TargetLabel: target})
	var found []objects.Object
	cms, err := c.configMaps.List(sel)
	if err != nil {
		return nil, err
	}
	for _, cm := range cms {
		o, _ := objects.ObjectOf(cm)
		found = append(found, o)
	}
	if len(c.secrets) > 0 {
		secs, err := c.secrets.List(sel)
		if err != nil {
			return nil, err
		}
		for _, s := range secs {
			o, _ := objects.ObjectOf(s)
			found = append(found, o)
		}
	}
	return found, nil
}

// anyWritten is one of target's objects of kind and name, the base of its first
// rendering.
func (c *Controller) anyWritten(kind objects.Kind, target, name string) *objects.Object {
	found, _ := c.writtenBy(target)
	for _, o := range found {
		if o.Kind() == kind && o.Meta.GetName() == name {
			return &o
		}
	}
	return nil
}

// createdByTargets reports whether a TrustTarget created the object: it carries
// CreatedAnnotation, set by the targets' field manager.
func createdByTargets(m metav1.Object) bool {
	return m.GetAnnotations()[v1alpha1.CreatedAnnotation] == "true" && objects.OwnedBy(m, FieldManager).Annotations[v1alpha1.CreatedAnnotation]
}

// apply writes d into namespace's object with server-side apply, without force: a key
// another manager owns is a conflict, reported, never taken. It returns the object's
// new resourceVersion.
func (c *Controller) apply(ctx context.Context, kind objects.Kind, namespace, object string, d objects.Desired) (string, error) {
	c.cfg.Metrics.Wrote("targets", kind, "apply")
	rv, err := objects.Apply(ctx, c.cfg.Client, kind, namespace, object, FieldManager, d)
	if apierrors.IsConflict(err) {
		return "", objects.FieldConflict(err, "%s %s/%s: another manager owns a field this target writes, which is left as it is: %s; choose another key (the source's path) or object name, or remove that field", kind, namespace, object, objects.ConflictDetail(err))
	}
	if err != nil {
		return "", fmt.Errorf("%s %s/%s: %w", kind, namespace, object, err)
	}
	return rv, nil
}

// releaseAll takes target's keys and label out of every object it wrote that keep
// does not keep (all of them when keep is nil). An object another target claims
// passes to it whole (that target's next apply replaces the keys): nothing is
// released or deleted under it.
func (c *Controller) releaseAll(ctx context.Context, target string, keep func(kind objects.Kind, namespace, name string) bool, claimed claimSet) error {
	found, err := c.writtenBy(target)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range found {
		kind := o.Kind()
		if keep != nil && keep(kind, o.Meta.GetNamespace(), o.Meta.GetName()) {
			continue
		}
		ns, err := c.namespaces.Get(o.Meta.GetNamespace())
		if apierrors.IsNotFound(err) || err == nil && (ns.Status.Phase == corev1.NamespaceTerminating || ns.DeletionTimestamp != nil) {
			continue // going: the namespace controller deletes the object; releasing it would be two writes for nothing
		}
		if err == nil {
			if w, _ := writer(claimed, ns, kind, o.Meta.GetName(), ""); w != "" && w != target {
				c.queue.Add(w)
				continue
			}
		}
		errs = append(errs, c.release(ctx, kind, o))
	}
	return errors.Join(errs...)
}

// release applies an empty configuration: the API server removes every field only
// this manager owned; then an object the targets created, with nothing left in it,
// goes. An object someone else made stays, however empty.
func (c *Controller) release(ctx context.Context, kind objects.Kind, o objects.Object) error {
	namespace, name := o.Meta.GetNamespace(), o.Meta.GetName()
	created := createdByTargets(o.Meta)
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	c.cfg.Metrics.Wrote("targets", kind, "apply")
	var left int
	var rv string
	if kind == objects.Secret {
		s, err := c.cfg.Client.CoreV1().Secrets(namespace).Apply(ctx, applycorev1.Secret(name, namespace), opts)
		if err != nil {
			return objects.IgnoreNotFound(err)
		}
		left, rv = len(s.Data)+len(s.StringData)+len(s.Labels)+len(s.Annotations), s.ResourceVersion
	} else {
		cm, err := c.cfg.Client.CoreV1().ConfigMaps(namespace).Apply(ctx, applycorev1.ConfigMap(name, namespace), opts)
		if err != nil {
			return objects.IgnoreNotFound(err)
		}
		left, rv = len(cm.Data)+len(cm.BinaryData)+len(cm.Labels)+len(cm.Annotations), cm.ResourceVersion
	}
	if !created || left > 0 {
		return nil
	}
	del := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}
	c.cfg.Metrics.Wrote("targets", kind, "delete")
	var err error
	if kind == objects.Secret {
		err = c.cfg.Client.CoreV1().Secrets(namespace).Delete(ctx, name, del)
	} else {
		err = c.cfg.Client.CoreV1().ConfigMaps(namespace).Delete(ctx, name, del)
	}
	if apierrors.IsConflict(err) {
		return nil // someone wrote to it meanwhile: it is theirs now
	}
	return objects.IgnoreNotFound(err)
}

// setStatus records the status and the Ready condition r, and an Event when Ready
// changed.
func (c *Controller) setStatus(ctx context.Context, u *unstructured.Unstructured, status v1alpha1.TrustTargetStatus, r readystatus.Ready) error {
	var old v1alpha1.TrustTargetStatus
	if t, err := v1alpha1.TrustTargetFromUnstructured(u); err == nil {
		old = t.Status
	}
	status.ObservedGeneration = u.GetGeneration()
	status.Conditions = slices.Clone(old.Conditions)
	changed := readystatus.Set(&status.Conditions, r, u.GetGeneration())
	c.cfg.Metrics.TargetReady(u.GetName(), r.OK)
	_, err := c.status.Write(ctx, u, old, &status, changed, r, nil)
	return err
}
