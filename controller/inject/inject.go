// Package inject fills the objects annotated trustsync.io/inject: "true" (ConfigMaps,
// Secrets where allowed, and the caBundle fields of webhook configurations,
// APIServices and CRDs) with the sources their annotations name, kept current, and
// lists what it filled in one index the node agents and the signer read.
package inject

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/controller/objects"
	"github.com/trustsync/trustsync/delivery/watch"
	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/kubeapi/queue"
)

// MaxInjectedPerNamespace is how many annotated ConfigMaps (and as many Secrets) of
// one namespace are filled at once.
const MaxInjectedPerNamespace = 256

// ReasonInjectNotGranted is the Warning Event on an annotated object whose sources
// its namespace is not granted (every one of them, or some, which are left out).
const ReasonInjectNotGranted = "TrustInjectNotGranted"

// InjectFieldManager owns what annotated objects are given: the keys of a ConfigMap or
// Secret named by the sources' paths, or the caBundle fields.
const InjectFieldManager = "trustsync-inject"

// FillConfig is what the injection controller needs.
type FillConfig struct {
	Client   kubernetes.Interface
	Dynamic  dynamic.Interface
	Metadata metadata.Interface
	Registry *watch.Registry
	Events   record.EventRecorder
	// Secrets fills annotated Secrets too (those of SecretNames alone, where set);
	// CABundles fills annotated webhook configurations, APIServices and CRDs.
	Secrets, CABundles bool
	SecretNames        []string
	Resync             time.Duration
	Metrics            *objects.Metrics
	// ObjectMeta, when set, is the metadata-only watches to read through, shared with
	// the TrustTarget controller (one watch a kind, or a Secret name, for both);
	// otherwise the injector makes its own.
	ObjectMeta *objects.ObjectMeta
	// Index is the ConfigMap the filled objects are listed in (v1alpha1.InjectedIndex)
	// for the node agents and the signer; no name: none is published.
	Index types.NamespacedName
	// Tenancy, when enforced, fills an object with the sources its namespace is
	// granted only.
	Tenancy objects.Tenancy
}

// Filler fills objects annotated trustsync.io/inject: "true" with the sources
// their annotations name, kept current.
type Filler struct {
	cfg    FillConfig
	kinds  map[string]objects.Kind
	store  map[string]objects.ReadStore
	queue  workqueue.TypedRateLimitingInterface[string]
	start  func(context.Context)
	synced []cache.InformerSynced

	state *objects.Tended
	index *injectedIndex // nil: none published

	mu     sync.Mutex
	warned map[string]string // the last warning recorded per object
}

// NewFiller watches the metadata of every object of the allowed kinds (only their
// annotations are needed to know which ask) and queues those that ask.
func NewFiller(cfg FillConfig) *Filler {
	in := &Filler{cfg: cfg, kinds: map[string]objects.Kind{}, store: map[string]objects.ReadStore{}, warned: map[string]string{},
		queue: queue.New[string]("trustsync_inject")}
	in.state = objects.NewTended(cfg.Registry, func(key string) { in.queue.Add(key) })
	if cfg.Index.Name != "" {
		in.index = newInjectedIndex(cfg.Client, cfg.Index)
	}
	kinds := []objects.Kind{objects.ConfigMap}
	if cfg.Secrets {
		kinds = append(kinds, objects.Secret)
	}
	if cfg.CABundles {
		kinds = append(kinds, objects.CABundleKinds...)
	}
	watches := cfg.ObjectMeta
	if watches == nil {
		watches = objects.NewObjectMeta(cfg.Metadata, cfg.Resync, cfg.SecretNames)
	}
	for _, k := range kinds {
		infs := []informers.GenericInformer{watches.For(k)}
		if k == objects.Secret {
			infs = watches.Secrets()
		}
		in.kinds[k.Resource.Resource] = k
		var all objects.Stores
		for _, gi := range infs {
			informer := gi.Informer()
			all = append(all, informer.GetStore())
			enqueue := func(obj any) {
				m, err := objects.MetaOf(obj)
				if err != nil {
					return
				}
				_, asks := m.GetAnnotations()[v1alpha1.AnnotationInject]
				if asks || in.state.Lookup(injectKey(k, m)) != nil {
					in.queue.Add(injectKey(k, m))
				}
			}
			_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) }, DeleteFunc: enqueue})
			in.synced = append(in.synced, informer.HasSynced)
		}
		in.store[k.Resource.Resource] = all
	}
	in.start = func(ctx context.Context) { watches.Start(ctx.Done()) }
	return in
}

func injectKey(k objects.Kind, m metav1.Object) string {
	if m.GetNamespace() == "" {
		return k.Resource.Resource + "|" + m.GetName()
	}
	return k.Resource.Resource + "|" + m.GetNamespace() + "/" + m.GetName()
}

// EnqueueAll looks at every annotated object again: what a namespace is granted
// changed.
func (in *Filler) EnqueueAll() {
	for resource, store := range in.store {
		for _, obj := range store.List() {
			if m, err := objects.MetaOf(obj); err == nil {
				if _, asks := m.GetAnnotations()[v1alpha1.AnnotationInject]; asks {
					in.queue.Add(injectKey(in.kinds[resource], m))
				}
			}
		}
	}
}

// Run fills until ctx is done.
func (in *Filler) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer in.queue.ShutDown()
	if in.index != nil {
		if err := in.index.seed(ctx, in.keyOfIndexed); err != nil {
			// Published from the objects alone: their readers may go unobserved
			// until each is filled again.
			klog.ErrorS(err, "Cannot read the injected index written before", "configMap", in.cfg.Index)
		}
	}
	in.start(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), in.synced...) {
		return
	}
	if in.index != nil {
		in.index.keepOnly(in.asks)
		go in.index.run(ctx, time.Second)
	}
	klog.InfoS("Filling annotated objects", "kinds", len(in.kinds))
	queue.Work(ctx, in.queue, workers, "annotated object", in.reconcile)
	<-ctx.Done()
	in.state.CloseAll()
}

func (in *Filler) reconcile(ctx context.Context, key string) (time.Duration, error) {
	in.cfg.Metrics.Reconciled("inject")
	resource, objKey, _ := strings.Cut(key, "|")
	k := in.kinds[resource]
	obj, exists, err := in.store[resource].GetByKey(objKey)
	if err != nil {
		return 0, err
	}
	if !exists {
		in.forget(key)
		return 0, nil
	}
	m := obj.(*metav1.PartialObjectMetadata)
	ref := &corev1.ObjectReference{Kind: k.Name, APIVersion: k.Resource.GroupVersion().String(), Namespace: m.Namespace, Name: m.Name, UID: m.UID}
	sources, asks, errs := injector.ObjectSources(m.Annotations)
	if !asks {
		in.forget(key) // no longer asks: what was written stays, untended
		return 0, nil
	}
	errs = append(errs, checkInjectSources(k, sources)...)
	if len(errs) > 0 {
		in.warnOnce(key, ref, "TrustInjectInvalid", errs.ToAggregate().Error())
		return 0, nil
	}
	sources, refused, err := in.cfg.Tenancy.Split(ctx, m.Namespace, sources)
	if err != nil {
		return 0, err // nothing written, nothing taken away, until the grants are known
	}
	if refused != nil {
		what := "left out"
		if len(sources) == 0 {
			what = "removed what trustsync wrote; nothing written"
		}
		in.warnOnce(key+"#grants", ref, ReasonInjectNotGranted, fmt.Sprintf("%s: not granted to namespace %s: %v", what, m.Namespace, refused))
		if len(sources) == 0 {
			// A grant withdrawn takes the anchors away: the keys this controller
			// applied are dropped (an apply of none), the object's other keys stay.
			in.forget(key)
			return 0, objects.IgnoreNotFound(in.applyKeys(ctx, k, m.Namespace, m.Name, map[string]string{}, nil))
		}
	} else {
		in.mu.Lock()
		delete(in.warned, key+"#grants") // a later refusal is news again
		in.mu.Unlock()
	}
	if t := m.Labels[v1alpha1.TargetLabel]; t != "" && !k.CABundle {
		in.warnOnce(key, ref, "TrustInjectConflict", fmt.Sprintf("TrustTarget %s writes this %s (label %s); one object has one writer, so its %s annotation is not acted on: remove the annotation, or have the TrustTarget name another object", t, k.Name, v1alpha1.TargetLabel, v1alpha1.AnnotationInject))
		in.forget(key)
		return 0, nil
	}
	if in.state.Lookup(key) == nil && !k.CABundle {
		// A tenant may annotate as many objects as it may create: each namespace
		// gets so many tended at once, so no one namespace can exhaust the
		// controller every tenant shares.
		if n := in.state.Count(resource + "|" + m.Namespace + "/"); n >= MaxInjectedPerNamespace {
			in.warnOnce(key, ref, "TrustInjectRefused", fmt.Sprintf("namespace %s has %d annotated %ss filled already, the most one namespace may have; remove the %s annotation from some, or use a TrustTarget", m.Namespace, n, k.Name, v1alpha1.AnnotationInject))
			return 0, nil
		}
	}
	st, err := in.state.Get(ctx, key, objects.SpecKey(sources), sources)
	if err != nil {
		return 0, err
	}
	if !st.Set.HasSynced() {
		return time.Second, nil
	}
	var live *objects.Object
	if !k.CABundle && st.Last == nil {
		// The first rendering since a start: the object holds the last good content
		// of any source that fails now.
		if live, err = objects.GetObject(ctx, in.cfg.Client, k, m.Namespace, m.Name); err != nil {
			return 0, objects.IgnoreNotFound(err)
		}
		st.Seed(live.Files(st.Plan.Paths()))
	}
	r := st.Render()
	data, binary := objects.Payload(sources, r)
	if !k.CABundle && r.Err() != nil {
		if live == nil {
			if live, err = objects.GetObject(ctx, in.cfg.Client, k, m.Namespace, m.Name); err != nil {
				return 0, objects.IgnoreNotFound(err)
			}
		}
		objects.KeepHeld(sources, r, live, data, binary)
	}
	if len(data)+len(binary) == 0 {
		in.warnOnce(key, ref, "TrustInjectFailed", "nothing written: "+r.Err().Error())
		return 0, nil
	}
	if err := objects.TooLarge(data, binary); err != nil {
		// Refused before anything is sent, and the rendering dropped: what cannot
		// be written is not held (it comes back with the object's next change).
		in.warnOnce(key, ref, "TrustInjectTooLarge", "nothing written: "+err.Error())
		in.forget(key)
		return 0, nil
	}
	digest := objects.DigestOf(data, binary)
	switch {
	case k.CABundle:
		in.cfg.Metrics.Wrote("inject", k, "apply")
		err = in.applyCABundle(ctx, k, m.Name, data)
	case live != nil && live.Holds(objects.Desired{Data: data, Binary: binary}, InjectFieldManager):
		// Holds it already: after a restart, nothing is sent.
	default:
		in.cfg.Metrics.Wrote("inject", k, "apply")
		err = in.applyKeys(ctx, k, m.Namespace, m.Name, data, binary)
	}
	if err != nil {
		// Said once, and tried again with the queue's backoff: the next try must
		// not wait for the object's next change or the resync.
		in.warnOnce(key, ref, "TrustInjectFailed", err.Error())
		if objects.Retryable(err) {
			return 0, err
		}
		return 0, nil
	}
	in.mu.Lock()
	delete(in.warned, key)
	in.mu.Unlock()
	if in.index != nil {
		in.index.set(key, v1alpha1.InjectedObject{Kind: k.Name, Namespace: m.Namespace, Name: m.Name, Sources: sources, Anchors: r.AnchorIDs()})
	}
	if digest != st.Written {
		st.Written = digest
		what := "keys " + strings.Join(objects.KeysOf(data, binary), ", ")
		if k.CABundle {
			what = "caBundle"
		}
		msg := fmt.Sprintf("Wrote %s from %s", what, describeSources(sources))
		if r.Err() != nil {
			msg += "; kept the last good content of: " + r.Err().Error()
		}
		in.cfg.Events.Event(ref, corev1.EventTypeNormal, "TrustInjected", msg)
	}
	return 0, nil
}

// forget stops tending the object and drops it from the index: its content is no
// longer known to be current.
func (in *Filler) forget(key string) {
	in.state.Forget(key)
	if in.index != nil {
		in.index.forget(key)
	}
}

// asks reports whether the object of key is known and annotated to ask for trust.
func (in *Filler) asks(key string) bool {
	resource, objKey, _ := strings.Cut(key, "|")
	store, ok := in.store[resource]
	if !ok {
		return false
	}
	obj, exists, err := store.GetByKey(objKey)
	if err != nil || !exists {
		return false
	}
	m, err := objects.MetaOf(obj)
	if err != nil {
		return false
	}
	_, asks := m.GetAnnotations()[v1alpha1.AnnotationInject]
	return asks
}

// keyOfIndexed is the key of an object the index lists, if its kind is filled.
func (in *Filler) keyOfIndexed(o v1alpha1.InjectedObject) (string, bool) {
	for _, k := range in.kinds {
		if k.Name == o.Kind {
			return injectKey(k, &metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name}), true
		}
	}
	return "", false
}

// warnOnce records a Warning on the object, once per distinct message.
func (in *Filler) warnOnce(key string, ref *corev1.ObjectReference, reason, msg string) {
	in.mu.Lock()
	seen := in.warned[key] == msg
	in.warned[key] = msg
	in.mu.Unlock()
	if st := in.state.Lookup(key); st != nil {
		st.Written = "" // the next good write is news again
	}
	if !seen {
		in.cfg.Events.Event(ref, corev1.EventTypeWarning, reason, msg)
	}
}

// checkInjectSources refuses what an annotated object cannot take.
func checkInjectSources(k objects.Kind, sources []v1alpha1.Source) (errs field.ErrorList) {
	path := func(key string) *field.Path { return field.NewPath("metadata", "annotations").Key(key) }
	var files []string
	for _, s := range sources {
		if s.ConfigMap != nil || s.Secret != nil || s.PasswordSecret != nil {
			errs = append(errs, field.Forbidden(path(injector.AnnotationSources), "an annotated object takes bundles and the public roots; a ConfigMap or Secret source, or a password Secret, is for pods (publish those anchors as a bundle)"))
		}
		if !v1alpha1.KeyPattern.MatchString(s.Path) {
			errs = append(errs, field.Invalid(path(injector.AnnotationPath), s.Path, "must be a key: letters, digits, '-', '_' and '.' only"))
		}
		if !slices.Contains(files, s.Path) {
			files = append(files, s.Path)
		}
		if k.CABundle && s.FileFormat() != v1alpha1.FormatPEM {
			errs = append(errs, field.Invalid(path(injector.AnnotationFormat), s.Format, "a caBundle is PEM"))
		}
	}
	if k.CABundle && len(files) > 1 {
		errs = append(errs, field.Invalid(path(injector.AnnotationSources), strings.Join(files, ", "), "a caBundle is one PEM file: name sources writing one path"))
	}
	return errs
}

// applyKeys writes the keys into the ConfigMap or Secret, without force: a key
// another manager owns is reported, not taken.
func (in *Filler) applyKeys(ctx context.Context, k objects.Kind, namespace, name string, data map[string]string, binary map[string][]byte) error {
	_, err := objects.Apply(ctx, in.cfg.Client, k, namespace, name, InjectFieldManager, objects.Desired{Data: data, Binary: binary})
	if apierrors.IsConflict(err) {
		return objects.FieldConflict(err, "another manager owns a key the annotations name, which is left as it is: %s; name another path (trustsync.io/path, or each source's path)", objects.ConflictDetail(err))
	}
	return err
}

// applyCABundle sets every caBundle of the object to pem. The annotation hands those
// fields to trustsync, so it takes them even from another manager (force), and
// nothing else.
func (in *Filler) applyCABundle(ctx context.Context, k objects.Kind, name string, data map[string]string) error {
	var pem string
	for _, v := range data {
		pem = v
	}
	ca := base64.StdEncoding.EncodeToString([]byte(pem))
	live, err := in.cfg.Dynamic.Resource(k.Resource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	patch := &unstructured.Unstructured{Object: map[string]any{"apiVersion": k.Resource.GroupVersion().String(), "kind": k.Name, "metadata": map[string]any{"name": name}}}
	switch k.Name {
	case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
		webhooks, _, _ := unstructured.NestedSlice(live.Object, "webhooks")
		var items []any
		for _, w := range webhooks {
			if wm, ok := w.(map[string]any); ok {
				items = append(items, map[string]any{"name": wm["name"], "clientConfig": map[string]any{"caBundle": ca}})
			}
		}
		if len(items) == 0 {
			return fmt.Errorf("%s %s has no webhooks to give a caBundle", k.Name, name)
		}
		patch.Object["webhooks"] = items
	case "APIService":
		patch.Object["spec"] = map[string]any{"caBundle": ca}
	case "CustomResourceDefinition":
		if s, _, _ := unstructured.NestedString(live.Object, "spec", "conversion", "strategy"); s != "Webhook" {
			return fmt.Errorf("CustomResourceDefinition %s has no conversion webhook (spec.conversion.strategy is %q) to give a caBundle", name, s)
		}
		patch.Object["spec"] = map[string]any{"conversion": map[string]any{"strategy": "Webhook", "webhook": map[string]any{"clientConfig": map[string]any{"caBundle": ca}}}}
	}
	raw, err := patch.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = in.cfg.Dynamic.Resource(k.Resource).Patch(ctx, name, types.ApplyPatchType, raw, metav1.PatchOptions{FieldManager: InjectFieldManager, Force: ptrTrue()})
	return err
}

func ptrTrue() *bool { t := true; return &t }

func describeSources(sources []v1alpha1.Source) string {
	var out []string
	for _, s := range sources {
		switch {
		case s.Name != "":
			out = append(out, "bundle "+s.Name)
		case s.SignerName != "":
			out = append(out, "signer "+s.SignerName+"'s bundles")
		case s.DefaultCAs:
			out = append(out, "the public roots")
		}
	}
	return strings.Join(out, ", ")
}
