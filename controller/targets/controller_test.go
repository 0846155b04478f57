package targets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/trustsync/trustsync/api/v1alpha1"
	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/controller/objects"
	"github.com/trustsync/trustsync/delivery/watch"
	"github.com/trustsync/trustsync/tenancy/tenancytest"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

var (
	corpCA    = fixtures.CA("corp root")
	partnerCA = fixtures.CA("partner root")
)

// world is what the API server holds when a test starts: namespaces, ConfigMaps and
// Secrets, bundles and TrustTargets.
type world struct {
	namespaces []*corev1.Namespace
	objects    []runtime.Object // ConfigMaps and Secrets
	bundles    map[string]*fixtures.Cert
	targets    []*v1alpha1.TrustTarget
}

// harness is a Controller over fake clients holding a world, its informers synced.
type harness struct {
	t       *testing.T
	ctx     context.Context
	c       *Controller
	kube    *fake.Clientset
	dyn     *dynamicfake.FakeDynamicClient
	events  *record.FakeRecorder
	applied []string // NAMESPACE/NAME of every ConfigMap or Secret applied, in order
}

func ns(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func terminating(name string, labels map[string]string) *corev1.Namespace {
	n := ns(name, labels)
	n.Status.Phase = corev1.NamespaceTerminating
	return n
}

// target is a TrustTarget writing sources into kind/name of the namespaces labelled
// trust=corp.
func target(name, kind, object string, sources ...v1alpha1.Source) *v1alpha1.TrustTarget {
	ref := &v1alpha1.ObjectRef{Name: object}
	t := &v1alpha1.TrustTarget{TypeMeta: metav1.TypeMeta{APIVersion: "trustsync.io/v1alpha1", Kind: v1alpha1.TrustTargetKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1, CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))},
		Spec: v1alpha1.TrustTargetSpec{Sources: sources, Target: v1alpha1.Target{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"trust": "corp"}}}}}
	if kind == v1alpha1.KindSecret {
		t.Spec.Target.Secret = ref
	} else {
		t.Spec.Target.ConfigMap = ref
	}
	return t
}

func bundleSource(name, path string) v1alpha1.Source { return v1alpha1.Source{Name: name, Path: path} }

func ctb(name string, cas ...*fixtures.Cert) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": tsbundle.NativeV1.GroupVersion.String(), "kind": "ClusterTrustBundle",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"trustBundle": fixtures.Bundle(cas...)},
	}}
}

func unstructuredOf(t *testing.T, obj any) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// start builds the controller over w; cfg's Secrets, SecretNames and Tenancy are
// taken, the rest is the harness's.
func start(t *testing.T, w world, cfg Config) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var kubeObjects []runtime.Object
	for _, n := range w.namespaces {
		kubeObjects = append(kubeObjects, n)
	}
	kube := fake.NewClientset(append(kubeObjects, w.objects...)...)
	var dynObjects []runtime.Object
	for name, ca := range w.bundles {
		dynObjects = append(dynObjects, ctb(name, ca))
	}
	for _, tt := range w.targets {
		dynObjects = append(dynObjects, unstructuredOf(t, tt))
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		tsbundle.NativeV1.GroupVersionResource(): "ClusterTrustBundleList",
		v1alpha1.TrustTargetResource:             "TrustTargetList",
	}, dynObjects...)
	registry := watch.New(ctx, dyn, nil)
	native := tsbundle.NativeV1
	if _, err := registry.Follow(ctx, tsbundle.Served{Native: &native}, 0); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ctx: ctx, kube: kube, dyn: dyn, events: record.NewFakeRecorder(100)}
	kube.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if p, ok := a.(k8stesting.PatchAction); ok && p.GetPatchType() == "application/apply-patch+yaml" {
			h.applied = append(h.applied, p.GetNamespace()+"/"+p.GetName())
		}
		return false, nil, nil
	})
	cfg.Client, cfg.Dynamic, cfg.Registry, cfg.Events = kube, dyn, registry, h.events
	cfg.Metrics = objects.NewMetrics(prometheus.NewRegistry())
	h.c = New(cfg)
	h.c.start(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), h.c.synced...) {
		t.Fatal("the informers did not sync")
	}
	t.Cleanup(h.c.state.CloseAll)
	return h
}

// reconcile reconciles target name until its sources have synced, failing on an
// error.
func (h *harness) reconcile(name string) {
	h.t.Helper()
	if err := h.reconcileErr(name); err != nil {
		h.t.Fatalf("reconcile %s: %v", name, err)
	}
}

// reconcileErr reconciles target name until its sources have synced, and returns
// the reconcile's error: one the queue retries with backoff.
func (h *harness) reconcileErr(name string) error {
	h.t.Helper()
	var err error
	poll.True(h.t, 10*time.Second, "TrustTarget "+name+"'s sources to sync", func() bool {
		var after time.Duration
		after, err = h.c.reconcile(h.ctx, name)
		return err != nil || after == 0
	})
	return err
}

// settle waits until the controller's informers hold every object it wrote, as a
// controller that keeps running would before its next reconcile.
func (h *harness) settle() {
	h.t.Helper()
	poll.True(h.t, 10*time.Second, "the informers to see the controller's writes", func() bool {
		cms, err := h.kube.CoreV1().ConfigMaps("").List(h.ctx, metav1.ListOptions{LabelSelector: v1alpha1.TargetLabel})
		if err != nil {
			return false
		}
		for _, cm := range cms.Items {
			// The fake sets no resourceVersions: the objects themselves are compared.
			if cached, err := h.c.configMaps.ConfigMaps(cm.Namespace).Get(cm.Name); err != nil || !equality.Semantic.DeepEqual(cached.Data, cm.Data) ||
				!equality.Semantic.DeepEqual(cached.Labels, cm.Labels) || !equality.Semantic.DeepEqual(cached.ManagedFields, cm.ManagedFields) {
				return false
			}
		}
		return true
	})
}

// configMap is namespace's ConfigMap name as the API server holds it, nil when none.
func (h *harness) configMap(namespace, name string) *corev1.ConfigMap {
	h.t.Helper()
	cm, err := h.kube.CoreV1().ConfigMaps(namespace).Get(h.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return cm
}

// ready is target name's Ready condition and status as the API server holds them.
func (h *harness) ready(name string) (*metav1.Condition, v1alpha1.TrustTargetStatus) {
	h.t.Helper()
	u, err := h.dyn.Resource(v1alpha1.TrustTargetResource).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	tt, err := v1alpha1.TrustTargetFromUnstructured(u)
	if err != nil {
		h.t.Fatal(err)
	}
	return meta.FindStatusCondition(tt.Status.Conditions, v1alpha1.ConditionReady), tt.Status
}

// recorded is every Event recorded so far, "TYPE REASON MESSAGE".
func (h *harness) recorded() []string {
	var out []string
	for {
		select {
		case e := <-h.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// The rules of one reconcile, each a case: what the API server holds before, and
// what the target's objects, its Ready condition and its Events say after.
func TestReconcile_WritesEverySelectedNamespaceAndSaysWhyNot(t *testing.T) {
	corp := map[string]string{"trust": "corp"}
	corpBundle := map[string]*fixtures.Cert{"corp": corpCA}
	for _, tc := range []struct {
		name  string
		world world
		cfg   Config
		// want: namespace -> the ca.pem the target's ConfigMap "roots" holds there
		// ("" for no ConfigMap).
		want        map[string]string
		wantReason  string
		wantReady   bool
		wantMessage string
		wantEvent   string
		// wantOthers: keys the object holds beside the target's.
		wantOthers map[string]map[string]string
		// wantCreated: namespaces whose object the target created (so may delete).
		wantCreated []string
	}{
		{
			name: "every selected namespace gets the bundle's anchors, in an object the target created",
			world: world{namespaces: []*corev1.Namespace{ns("team-a", corp), ns("team-b", corp)}, bundles: corpBundle,
				targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))}},
			want:       map[string]string{"team-a": anchors(corpCA), "team-b": anchors(corpCA)},
			wantReason: v1alpha1.ReasonSynced, wantReady: true, wantMessage: "ConfigMap roots holds the current anchors in 2 of 2 selected namespaces",
			wantEvent: "Normal Synced", wantCreated: []string{"team-a", "team-b"},
		},
		{
			name: "a namespace the selector does not match, or one terminating, gets nothing",
			world: world{namespaces: []*corev1.Namespace{ns("team-a", corp), ns("other", nil), terminating("leaving", corp)}, bundles: corpBundle,
				targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))}},
			want:       map[string]string{"team-a": anchors(corpCA), "other": "", "leaving": ""},
			wantReason: v1alpha1.ReasonSynced, wantReady: true, wantMessage: "in 1 of 1 selected namespaces", wantCreated: []string{"team-a"},
		},
		{
			name: "an object someone else made is written into: its other keys stay, and it is not the target's to delete",
			world: world{namespaces: []*corev1.Namespace{ns("team-a", corp)}, bundles: corpBundle,
				objects: []runtime.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "roots"}, Data: map[string]string{"app.conf": "keep me"}}},
				targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))}},
			want:       map[string]string{"team-a": anchors(corpCA)},
			wantOthers: map[string]map[string]string{"team-a": {"app.conf": "keep me"}},
			wantReason: v1alpha1.ReasonSynced, wantReady: true,
		},
		{
			name: "an object annotated for injection is left to its annotations: a conflict, named",
			world: world{namespaces: []*corev1.Namespace{ns("team-a", corp)}, bundles: corpBundle,
				objects: []runtime.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "roots", Annotations: map[string]string{v1alpha1.AnnotationInject: "true"}}}},
				targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))}},
			want:       map[string]string{"team-a": ""},
			wantReason: v1alpha1.ReasonConflict, wantMessage: "ConfigMap team-a/roots is annotated trustsync.io/inject and filled by the annotations it carries; one object has one writer",
			wantEvent: "Warning Conflict",
		},
		{
			name: "of two targets naming one object, the first to claim it writes and the other says so",
			world: world{namespaces: []*corev1.Namespace{ns("team-a", corp)}, bundles: map[string]*fixtures.Cert{"corp": corpCA, "partner": partnerCA},
				targets: []*v1alpha1.TrustTarget{
					func() *v1alpha1.TrustTarget {
						tt := target("first", v1alpha1.KindConfigMap, "roots", bundleSource("partner", "ca.pem"))
						tt.CreationTimestamp = metav1.NewTime(tt.CreationTimestamp.Add(-time.Hour))
						return tt
					}(),
					target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))}},
			want:       map[string]string{"team-a": ""},
			wantReason: v1alpha1.ReasonConflict, wantMessage: "ConfigMap team-a/roots is written by TrustTarget first, which claimed it first",
		},
		{
			name: "a bundle that does not exist writes nothing and says which",
			world: world{namespaces: []*corev1.Namespace{ns("team-a", corp)},
				targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))}},
			want:       map[string]string{"team-a": ""},
			wantReason: v1alpha1.ReasonSourceMissing, wantMessage: "nothing written: ", wantEvent: "Warning SourceMissing",
		},
		{
			name: "a selector matching no namespace is not a failure",
			world: world{namespaces: []*corev1.Namespace{ns("other", nil)}, bundles: corpBundle,
				targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))}},
			want:       map[string]string{"other": ""},
			wantReason: v1alpha1.ReasonNoNamespaces, wantReady: true, wantMessage: "the namespace selector matches no namespace", wantEvent: "Normal NoNamespaces",
		},
		{
			name: "a source with a namespace of its own is an invalid spec, named by field",
			world: world{namespaces: []*corev1.Namespace{ns("team-a", corp)},
				targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", v1alpha1.Source{ConfigMap: &v1alpha1.KeyRef{Name: "cm", Key: "ca.crt"}, Path: "ca.pem"})}},
			want:       map[string]string{"team-a": ""},
			wantReason: v1alpha1.ReasonInvalidSpec, wantMessage: "spec.sources[0]", wantEvent: "Warning InvalidSpec",
		},
		{
			name: "a Secret target is refused where Secrets are not allowed, saying how to allow them",
			world: world{namespaces: []*corev1.Namespace{ns("team-a", corp)}, bundles: corpBundle,
				targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindSecret, "roots", bundleSource("corp", "ca.pem"))}},
			want:       map[string]string{"team-a": ""},
			wantReason: v1alpha1.ReasonSecretsNotAllowed, wantMessage: "targets.secrets: true", wantEvent: "Warning SecretsNotAllowed",
		},
		{
			name: "a Secret name outside the authorized names is refused, naming them",
			world: world{namespaces: []*corev1.Namespace{ns("team-a", corp)}, bundles: corpBundle,
				targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindSecret, "roots", bundleSource("corp", "ca.pem"))}},
			cfg:        Config{Secrets: true, SecretNames: []string{"trust-roots"}},
			want:       map[string]string{"team-a": ""},
			wantReason: v1alpha1.ReasonSecretNotAuthorized, wantMessage: "trust-roots", wantEvent: "Warning SecretNotAuthorized",
		},
		{
			name: "a namespace not granted every source is not written, and named in the status",
			world: world{namespaces: []*corev1.Namespace{ns("team-a", corp), ns("team-b", corp)}, bundles: corpBundle,
				targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))}},
			cfg: func() Config {
				grants := tenancytest.New(t, map[string]v1alpha1.TrustPolicySpec{"team-a": {NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
					Bundles: []v1alpha1.BundleGrant{{Name: "corp"}}}})
				grants.Labels["team-a"] = map[string]string{"team": "a"}
				grants.Labels["team-b"] = map[string]string{"team": "b"}
				return Config{Tenancy: objects.Tenancy{Grants: grants.Lookup}}
			}(),
			want:       map[string]string{"team-a": anchors(corpCA), "team-b": ""},
			wantReason: v1alpha1.ReasonSynced, wantReady: true, wantMessage: "1 more selected are not granted every source and are not written (status.notGrantedNamespaces), first team-b",
			wantCreated: []string{"team-a"},
		},
		{
			name: "no namespace granted every source writes nothing and says so",
			world: world{namespaces: []*corev1.Namespace{ns("team-b", corp)}, bundles: corpBundle,
				targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))}},
			cfg: func() Config {
				grants := tenancytest.New(t, map[string]v1alpha1.TrustPolicySpec{})
				grants.Labels["team-b"] = map[string]string{"team": "b"}
				return Config{Tenancy: objects.Tenancy{Grants: grants.Lookup}}
			}(),
			want:       map[string]string{"team-b": ""},
			wantReason: v1alpha1.ReasonNotGranted, wantMessage: "nothing written: none of the 1 namespaces selected is granted every source (TrustPolicies), first team-b",
			wantEvent: "Warning NotGranted",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, tc.world, tc.cfg)
			name := tc.world.targets[len(tc.world.targets)-1].Name
			h.reconcile(name)
			for namespace, want := range tc.want {
				cm := h.configMap(namespace, "roots")
				got := ""
				if cm != nil && cm.Labels[v1alpha1.TargetLabel] == name {
					got = anchorsOf(t, cm.Data["ca.pem"])
				}
				if got != want {
					t.Errorf("ConfigMap %s/roots holds %q of the target's; want %q", namespace, got, want)
				}
				for k, v := range tc.wantOthers[namespace] {
					if cm == nil || cm.Data[k] != v {
						t.Errorf("ConfigMap %s/roots lost its own key %s", namespace, k)
					}
				}
				created := cm != nil && cm.Annotations[v1alpha1.CreatedAnnotation] == "true"
				if wantCreated := slices.Contains(tc.wantCreated, namespace); created != wantCreated {
					t.Errorf("ConfigMap %s/roots marked created by the target: %v, want %v", namespace, created, wantCreated)
				}
			}
			cond, _ := h.ready(name)
			if cond == nil || cond.Reason != tc.wantReason || (cond.Status == metav1.ConditionTrue) != tc.wantReady || !strings.Contains(cond.Message, tc.wantMessage) {
				t.Errorf("Ready = %+v; want reason %s, ready %v, a message containing %q", cond, tc.wantReason, tc.wantReady, tc.wantMessage)
			}
			if events := h.recorded(); tc.wantEvent != "" && !anyHasPrefix(events, tc.wantEvent) {
				t.Errorf("Events %q; want one %q", events, tc.wantEvent)
			}
		})
	}
}

// anchors is the identities of cas, as a trust file holding exactly them has them: a
// file's order is the anchors' SHA-256 order, not the test's.
func anchors(cas ...*fixtures.Cert) string {
	var ids []string
	for _, ca := range cas {
		ids = append(ids, tsbundle.AnchorID(ca.Cert.Raw))
	}
	slices.Sort(ids)
	return strings.Join(ids, ",")
}

// anchorsOf is the identities of the anchors a PEM trust file holds.
func anchorsOf(t *testing.T, pem string) string {
	t.Helper()
	ids, err := tsbundle.AnchorIDs([]byte(pem))
	if err != nil {
		t.Fatalf("the trust file does not decode: %v", err)
	}
	return strings.Join(ids, ",")
}

func anyHasPrefix(list []string, prefix string) bool {
	for _, x := range list {
		if strings.HasPrefix(x, prefix) {
			return true
		}
	}
	return false
}

// A reconcile that would change nothing sends nothing: the API server's load grows
// with the edits, not with the resyncs.
func TestReconcile_AppliesOnlyWhatChanged(t *testing.T) {
	corp := map[string]string{"trust": "corp"}
	h := start(t, world{namespaces: []*corev1.Namespace{ns("team-a", corp), ns("team-b", corp)}, bundles: map[string]*fixtures.Cert{"corp": corpCA},
		targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))}}, Config{})
	h.reconcile("corp")
	if len(h.applied) != 2 {
		t.Fatalf("the first reconcile applied %v; want one apply per namespace", h.applied)
	}
	h.applied = nil
	h.reconcile("corp") // before the informers have seen the writes
	h.settle()
	h.reconcile("corp") // after
	if len(h.applied) != 0 {
		t.Errorf("reconciles with nothing new applied %v; want nothing", h.applied)
	}
	// A bundle edit is one apply per namespace again.
	edited := ctb("corp", corpCA, partnerCA)
	if _, err := h.dyn.Resource(tsbundle.NativeV1.GroupVersionResource()).Update(h.ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 10*time.Second, "the edit to reach the ConfigMaps", func() bool {
		h.reconcile("corp")
		return anchorsOf(t, h.configMap("team-a", "roots").Data["ca.pem"]) == anchors(corpCA, partnerCA)
	})
	if len(h.applied) != 2 {
		t.Errorf("an edit applied %v; want one apply per namespace", h.applied)
	}
}

// What a target stops selecting is given back: an object it created and nothing else
// holds is deleted; an object someone else made loses the target's key and label
// alone; and a deleted target gives back everything.
func TestReconcile_ReleasesWhatItNoLongerSelects(t *testing.T) {
	corp := map[string]string{"trust": "corp"}
	h := start(t, world{
		namespaces: []*corev1.Namespace{ns("created", corp), ns("theirs", corp), ns("stays", corp)},
		objects:    []runtime.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "theirs", Name: "roots"}, Data: map[string]string{"app.conf": "keep me"}}},
		bundles:    map[string]*fixtures.Cert{"corp": corpCA},
		targets:    []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))},
	}, Config{})
	h.reconcile("corp")
	h.settle()
	for _, name := range []string{"created", "theirs"} {
		n, err := h.kube.CoreV1().Namespaces().Get(h.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Labels = nil
		if _, err := h.kube.CoreV1().Namespaces().Update(h.ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll.True(t, 10*time.Second, "the namespaces' new labels in the informer", func() bool {
		n, err := h.c.namespaces.Get("theirs")
		return err == nil && len(n.Labels) == 0
	})
	h.reconcile("corp")
	if cm := h.configMap("created", "roots"); cm != nil {
		t.Errorf("the ConfigMap the target created is still there: %+v", cm)
	}
	cm := h.configMap("theirs", "roots")
	if cm == nil || cm.Data["app.conf"] != "keep me" || cm.Data["ca.pem"] != "" || cm.Labels[v1alpha1.TargetLabel] != "" {
		t.Errorf("someone else's ConfigMap after release: %+v; want their key alone", cm)
	}
	if cm := h.configMap("stays", "roots"); cm == nil || anchorsOf(t, cm.Data["ca.pem"]) != anchors(corpCA) {
		t.Errorf("a namespace still selected lost its ConfigMap: %+v", cm)
	}

	h.settle()
	if err := h.dyn.Resource(v1alpha1.TrustTargetResource).Delete(h.ctx, "corp", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 10*time.Second, "the target's deletion in the informer", func() bool {
		_, exists, _ := h.c.targets.GetStore().GetByKey("corp")
		return !exists
	})
	h.reconcile("corp")
	if cm := h.configMap("stays", "roots"); cm != nil {
		t.Errorf("a deleted target's ConfigMap is still there: %+v", cm)
	}
}

// A write the API server refuses is that namespace's failure: the others are written,
// and the status names the namespace and the cause.
func TestReconcile_AWriteRefusedIsThatNamespacesFailureNamed(t *testing.T) {
	corp := map[string]string{"trust": "corp"}
	h := start(t, world{namespaces: []*corev1.Namespace{ns("team-a", corp), ns("quota", corp)}, bundles: map[string]*fixtures.Cert{"corp": corpCA},
		targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))}}, Config{})
	h.kube.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "quota" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "roots", errors.New("exceeded quota"))
		}
		return false, nil, nil
	})
	err := h.reconcileErr("corp")
	if err == nil || !strings.Contains(err.Error(), "1 of 2 namespaces not written, retrying: quota") {
		t.Errorf("reconcile = %v; want an error naming quota, so that the queue retries it", err)
	}
	if cm := h.configMap("team-a", "roots"); cm == nil || anchorsOf(t, cm.Data["ca.pem"]) != anchors(corpCA) {
		t.Errorf("a namespace that could be written was not: %+v", cm)
	}
	cond, status := h.ready("corp")
	if cond == nil || cond.Reason != v1alpha1.ReasonWriteFailed || !strings.Contains(cond.Message, "1 namespaces failed, first quota") || !strings.Contains(cond.Message, "exceeded quota") {
		t.Errorf("Ready = %+v; want WriteFailed naming quota and the cause", cond)
	}
	if status.Namespaces != 2 || status.Synced != 1 || len(status.Failures) != 1 || status.Failures[0].Namespace != "quota" {
		t.Errorf("status = %+v; want 2 selected, 1 synced, the failure in quota", status)
	}
}

// A write refused once is tried again by the queue, with its backoff: it does not wait
// for an unrelated event or the resync.
func TestRun_AWriteRefusedOnceIsWrittenByTheRetry(t *testing.T) {
	corp := map[string]string{"trust": "corp"}
	h := start(t, world{namespaces: []*corev1.Namespace{ns("team-a", corp), ns("quota", corp)}, bundles: map[string]*fixtures.Cert{"corp": corpCA},
		targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))}}, Config{})
	var refused atomic.Int32
	h.kube.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "quota" && refused.Add(1) == 1 {
			return true, nil, apierrors.NewServiceUnavailable("etcd leader changed")
		}
		return false, nil, nil
	})
	go h.c.Run(h.ctx, 1)
	poll.True(t, 10*time.Second, "the ConfigMap refused once to be written by a retry", func() bool {
		return h.configMap("quota", "roots") != nil
	})
	if n := refused.Load(); n < 2 {
		t.Errorf("%d writes to quota; want the refused one and its retry", n)
	}
}

// What no object can hold is refused before it is sent, saying what to do.
func TestReconcile_ContentNoObjectCanHoldIsRefusedBeforeItIsSent(t *testing.T) {
	corp := map[string]string{"trust": "corp"}
	var sources []v1alpha1.Source
	for i := range 12 {
		sources = append(sources, bundleSource("big", fmt.Sprintf("ca-%d.pem", i)))
	}
	cas := make([]*fixtures.Cert, 0, 200)
	for i := range 200 {
		cas = append(cas, fixtures.CA(fmt.Sprintf("big %d", i)))
	}
	w := world{namespaces: []*corev1.Namespace{ns("team-a", corp)}, targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", sources...)}}
	h := start(t, w, Config{})
	if _, err := h.dyn.Resource(tsbundle.NativeV1.GroupVersionResource()).Create(h.ctx, ctb("big", cas...), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 10*time.Second, "the bundle in the watches", func() bool {
		h.reconcile("corp")
		cond, _ := h.ready("corp")
		return cond != nil && cond.Reason != v1alpha1.ReasonSourceMissing
	})
	cond, _ := h.ready("corp")
	if cond == nil || cond.Reason != v1alpha1.ReasonWriteFailed || !strings.Contains(cond.Message, "more than one object holds") {
		t.Errorf("Ready = %+v; want WriteFailed saying no object holds it", cond)
	}
	if len(h.applied) != 0 {
		t.Errorf("applied %v; want nothing sent", h.applied)
	}
}

// A Secret target writes where Secrets are allowed and its name is authorized, and
// the truststores are binary keys beside the PEM.
func TestReconcile_ASecretTargetWritesEveryFormatWhereAllowed(t *testing.T) {
	corp := map[string]string{"trust": "corp"}
	h := start(t, world{namespaces: []*corev1.Namespace{ns("team-a", corp)}, bundles: map[string]*fixtures.Cert{"corp": corpCA},
		targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindSecret, "trust-roots",
			bundleSource("corp", "ca.pem"),
			v1alpha1.Source{Name: "corp", Path: "truststore.p12", Format: v1alpha1.FormatPKCS12},
			v1alpha1.Source{Name: "corp", Path: "truststore.jks", Format: v1alpha1.FormatJKS})}},
		Config{Secrets: true, SecretNames: []string{"trust-roots"}})
	h.reconcile("corp")
	s, err := h.kube.CoreV1().Secrets("team-a").Get(h.ctx, "trust-roots", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Secret target wrote nothing: %v", err)
	}
	if got := anchorsOf(t, string(s.Data["ca.pem"])); got != anchors(corpCA) {
		t.Errorf("ca.pem holds %s; want the corp root", got)
	}
	for _, key := range []string{"truststore.p12", "truststore.jks"} {
		if len(s.Data[key]) == 0 || strings.Contains(string(s.Data[key]), "BEGIN CERTIFICATE") {
			t.Errorf("%s is %d bytes of %q; want a binary truststore", key, len(s.Data[key]), truncate(s.Data[key]))
		}
	}
	cond, status := h.ready("corp")
	if cond == nil || cond.Reason != v1alpha1.ReasonSynced || status.Synced != 1 {
		t.Errorf("Ready = %+v, status %+v; want Synced in 1 namespace", cond, status)
	}
	if !slices.Equal(status.Anchors, []string{tsbundle.AnchorID(corpCA.Cert.Raw)}) {
		t.Errorf("status.anchors = %v; want the anchors the content holds (a rotation waits on them)", status.Anchors)
	}
}

func truncate(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// A controller that starts with no rendering of its own (a restart) and finds a
// source missing keeps what its object holds: the key is not taken away, and the
// status says the last good content was kept.
func TestReconcile_AfterARestartAMissingSourceKeepsWhatTheObjectHolds(t *testing.T) {
	corp := map[string]string{"trust": "corp"}
	tt := target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"), bundleSource("partner", "partner.pem"))
	written := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "roots", Labels: map[string]string{v1alpha1.TargetLabel: "corp"}},
		Data: map[string]string{"ca.pem": fixtures.Bundle(corpCA), "partner.pem": fixtures.Bundle(partnerCA)}}
	h := start(t, world{namespaces: []*corev1.Namespace{ns("team-a", corp)}, objects: []runtime.Object{written},
		bundles: map[string]*fixtures.Cert{"corp": corpCA}, // partner's bundle is gone
		targets: []*v1alpha1.TrustTarget{tt}}, Config{})
	h.reconcile("corp")
	cm := h.configMap("team-a", "roots")
	if cm == nil || anchorsOf(t, cm.Data["partner.pem"]) != anchors(partnerCA) {
		t.Errorf("partner.pem after a restart with its source missing: %+v; want the last good content kept", cm)
	}
	cond, _ := h.ready("corp")
	if cond == nil || cond.Reason != v1alpha1.ReasonSourceMissing || !strings.Contains(cond.Message, "kept the last good content of") {
		t.Errorf("Ready = %+v; want SourceMissing saying the last good content was kept", cond)
	}
}

// Of two targets naming one object, the one that writes it says so too, naming the
// other: neither is silent about a shared name.
func TestReconcile_TheClaimantThatWritesNamesTheOtherToo(t *testing.T) {
	corp := map[string]string{"trust": "corp"}
	first := target("first", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))
	first.CreationTimestamp = metav1.NewTime(first.CreationTimestamp.Add(-time.Hour))
	h := start(t, world{namespaces: []*corev1.Namespace{ns("team-a", corp)}, bundles: map[string]*fixtures.Cert{"corp": corpCA},
		targets: []*v1alpha1.TrustTarget{first, target("second", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))}}, Config{})
	h.reconcile("first")
	if cm := h.configMap("team-a", "roots"); cm == nil || cm.Labels[v1alpha1.TargetLabel] != "first" {
		t.Fatalf("the first claimant did not write: %+v", cm)
	}
	cond, _ := h.ready("first")
	if cond == nil || cond.Reason != v1alpha1.ReasonConflict || !strings.Contains(cond.Message, "TrustTarget second also names ConfigMap team-a/roots") {
		t.Errorf("Ready = %+v; want a Conflict naming the other target", cond)
	}
}

// A grant withdrawn takes the anchors away: the namespace's object goes at the next
// reconcile, and the status names the namespace not granted.
func TestReconcile_AGrantWithdrawnTakesTheAnchorsAway(t *testing.T) {
	corp := map[string]string{"trust": "corp"}
	grants := tenancytest.New(t, map[string]v1alpha1.TrustPolicySpec{"team-a": {NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
		Bundles: []v1alpha1.BundleGrant{{Name: "corp"}}}})
	grants.Labels["team-a"] = map[string]string{"team": "a"}
	h := start(t, world{namespaces: []*corev1.Namespace{ns("team-a", corp)}, bundles: map[string]*fixtures.Cert{"corp": corpCA},
		targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))}},
		Config{Tenancy: objects.Tenancy{Grants: grants.Lookup}})
	h.reconcile("corp")
	if h.configMap("team-a", "roots") == nil {
		t.Fatal("a granted namespace was not written")
	}
	h.settle()
	grants.Labels["team-a"] = map[string]string{"team": "b"} // the policy no longer selects it
	h.reconcile("corp")
	if cm := h.configMap("team-a", "roots"); cm != nil {
		t.Errorf("the object is still there after its grant was withdrawn: %+v", cm)
	}
	cond, status := h.ready("corp")
	if cond == nil || cond.Reason != v1alpha1.ReasonNotGranted || status.NotGranted != 1 || status.NotGrantedNamespaces[0].Namespace != "team-a" {
		t.Errorf("Ready = %+v, status %+v; want NotGranted naming team-a", cond, status)
	}
}

// The Ready condition a reconcile ends with, from what it wrote: a source missing
// comes first (the content is not what the sources say), then what was not granted,
// no namespace at all, a shared object, a conflict, a failure; what is Ready still
// names what it did not write.
func TestTally_ReadySaysTheFirstThingThatIsNotRight(t *testing.T) {
	spec := &v1alpha1.ParsedTrustTargetSpec{Kind: v1alpha1.KindConfigMap, Name: "roots"}
	missing := errors.New("bundle corp not found")
	for _, tc := range []struct {
		name        string
		tally       tally
		renderErr   error
		wantReason  string
		wantReady   bool
		wantMessage string
	}{
		{name: "every namespace written", tally: tally{status: v1alpha1.TrustTargetStatus{Namespaces: 3, Synced: 3}},
			wantReason: v1alpha1.ReasonSynced, wantReady: true, wantMessage: "ConfigMap roots holds the current anchors in 3 of 3 selected namespaces"},
		{name: "a source missing with nothing written", tally: tally{status: v1alpha1.TrustTargetStatus{Namespaces: 2}}, renderErr: missing,
			wantReason: v1alpha1.ReasonSourceMissing, wantMessage: "nothing written: bundle corp not found"},
		{name: "a source missing with the last good content kept", tally: tally{status: v1alpha1.TrustTargetStatus{Namespaces: 2, Synced: 2}}, renderErr: missing,
			wantReason: v1alpha1.ReasonSourceMissing, wantMessage: "in 2 of 2 selected namespaces; kept the last good content of: bundle corp not found"},
		{name: "no namespace granted", tally: tally{status: v1alpha1.TrustTargetStatus{NotGranted: 2, NotGrantedNamespaces: []v1alpha1.NamespaceFailure{{Namespace: "team-b", Message: "not granted corp"}}}},
			wantReason: v1alpha1.ReasonNotGranted, wantMessage: "none of the 2 namespaces selected is granted every source (TrustPolicies), first team-b: not granted corp"},
		{name: "no namespace selected is not a failure", tally: tally{},
			wantReason: v1alpha1.ReasonNoNamespaces, wantReady: true, wantMessage: "the namespace selector matches no namespace"},
		{name: "an object another target names too", tally: tally{status: v1alpha1.TrustTargetStatus{Namespaces: 1, Synced: 1}, shared: []string{"TrustTarget b also names ConfigMap a/roots"}},
			wantReason: v1alpha1.ReasonConflict, wantMessage: "TrustTarget b also names ConfigMap a/roots (in 1 namespaces): one object has one writer"},
		{name: "an object another writes", tally: tally{status: v1alpha1.TrustTargetStatus{Namespaces: 2, Synced: 1, Failures: []v1alpha1.NamespaceFailure{{Namespace: "a", Message: "written by TrustTarget b"}}}, failed: 1, conflicted: 1},
			wantReason: v1alpha1.ReasonConflict, wantMessage: "1 namespaces not written, first a: written by TrustTarget b"},
		{name: "a write refused", tally: tally{status: v1alpha1.TrustTargetStatus{Namespaces: 2, Synced: 1, Failures: []v1alpha1.NamespaceFailure{{Namespace: "a", Message: "forbidden"}}}, failed: 1},
			wantReason: v1alpha1.ReasonWriteFailed, wantMessage: "1 namespaces failed, first a: forbidden"},
		{name: "ready, naming the namespaces not granted", tally: tally{status: v1alpha1.TrustTargetStatus{Namespaces: 1, Synced: 1, NotGranted: 1, NotGrantedNamespaces: []v1alpha1.NamespaceFailure{{Namespace: "team-b", Message: "not granted corp"}}}},
			wantReason: v1alpha1.ReasonSynced, wantReady: true, wantMessage: "1 more selected are not granted every source and are not written (status.notGrantedNamespaces), first team-b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.tally.ready(spec, tc.renderErr)
			if got.Reason != tc.wantReason || got.OK != tc.wantReady || !strings.Contains(got.Message, tc.wantMessage) {
				t.Errorf("ready = %+v; want reason %s, ready %v, a message containing %q", got, tc.wantReason, tc.wantReady, tc.wantMessage)
			}
		})
	}
}

// Someone edits the key a target writes (kubectl edit): the key is theirs now, as
// server-side apply says, and the target reports it rather than taking it back; the
// object's other keys stay as they left them.
func TestReconcile_AKeyEditedByHandIsReportedNotTaken(t *testing.T) {
	corp := map[string]string{"trust": "corp"}
	h := start(t, world{namespaces: []*corev1.Namespace{ns("team-a", corp)}, bundles: map[string]*fixtures.Cert{"corp": corpCA},
		targets: []*v1alpha1.TrustTarget{target("corp", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem"))}}, Config{})
	h.reconcile("corp")
	h.settle()
	cm := h.configMap("team-a", "roots")
	cm.ManagedFields = nil // as kubectl edit sends it: the field managers are the server's to keep
	cm.Data["ca.pem"] = fixtures.Bundle(partnerCA)
	cm.Data["notes"] = "added by hand"
	if _, err := h.kube.CoreV1().ConfigMaps("team-a").Update(h.ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	h.settle()
	h.reconcile("corp")
	got := h.configMap("team-a", "roots")
	if anchorsOf(t, got.Data["ca.pem"]) != anchors(partnerCA) || got.Data["notes"] != "added by hand" {
		t.Errorf("after an edit: %v; want the edit left as it is", got.Data)
	}
	cond, status := h.ready("corp")
	if cond == nil || cond.Reason != v1alpha1.ReasonWriteFailed || !strings.Contains(cond.Message, "another manager owns a field this target writes, which is left as it is") {
		t.Errorf("Ready = %+v; want WriteFailed saying another manager owns the key", cond)
	}
	if status.Synced != 0 || len(status.Failures) != 1 || status.Failures[0].Namespace != "team-a" {
		t.Errorf("status = %+v; want team-a named as not written", status)
	}
}

// A namespace that comes, goes or changes its labels concerns only the targets whose
// selector picks it (before or after): under 1,000 targets a new namespace costs a
// reconcile of those that select it, not of all of them.
func TestNamespaceEvents_EnqueueOnlyTheTargetsSelectingTheNamespace(t *testing.T) {
	selecting := func(tt *v1alpha1.TrustTarget, team string) *v1alpha1.TrustTarget {
		tt.Spec.Target.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": team}}
		return tt
	}
	h := start(t, world{targets: []*v1alpha1.TrustTarget{
		selecting(target("a-roots", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem")), "a"),
		selecting(target("b-roots", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem")), "b"),
		selecting(target("a-more", v1alpha1.KindConfigMap, "more", bundleSource("corp", "ca.pem")), "a"),
	}}, Config{})
	queued := drainStarted(t, h, 3)
	for _, tc := range []struct {
		name  string
		event func()
		want  []string
	}{
		{"a new namespace of team a", func() { h.c.enqueueSelecting(ns("new", map[string]string{"team": "a"})) }, []string{"a-more", "a-roots"}},
		{"a namespace moving from team a to team b", func() {
			h.c.namespaceChanged(ns("moved", map[string]string{"team": "a"}), ns("moved", map[string]string{"team": "b"}))
		}, []string{"a-more", "a-roots", "b-roots"}},
		{"a namespace no target selects", func() { h.c.enqueueSelecting(ns("other", map[string]string{"team": "c"})) }, nil},
		{"a namespace of team b terminating", func() {
			h.c.namespaceChanged(ns("old", map[string]string{"team": "b"}), terminating("old", map[string]string{"team": "b"}))
		}, []string{"b-roots"}},
		{"a deletion known only by its tombstone", func() { h.c.enqueueSelecting(cache.DeletedFinalStateUnknown{Key: "gone"}) }, []string{"a-more", "a-roots", "b-roots"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.event()
			if got := queued(); !slices.Equal(got, tc.want) {
				t.Errorf("enqueued %v, want %v", got, tc.want)
			}
		})
	}
}

// drainStarted waits until the informers' start has queued every one of the n
// targets and the handlers are quiet, empties the queue, and returns what drains it
// again: the keys queued since, sorted.
func drainStarted(t *testing.T, h *harness, n int) func() []string {
	t.Helper()
	queued := func() []string {
		var out []string
		for h.c.queue.Len() > 0 {
			k, _ := h.c.queue.Get()
			h.c.queue.Done(k)
			h.c.queue.Forget(k)
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	poll.True(t, 10*time.Second, "the targets' own additions queued", func() bool { return h.c.queue.Len() == n })
	time.Sleep(200 * time.Millisecond)
	queued()
	return queued
}

// A target that comes, goes or changes the object it names is looked at again with
// the targets naming the same object in a namespace it selects (their claims are
// settled among them), and no other: not those naming another object, nor those
// naming the same object in other namespaces.
func TestTargetEvents_EnqueueTheTargetAndThoseNamingItsObjectInItsNamespacesOnly(t *testing.T) {
	teamTarget := func(name, object string) *v1alpha1.TrustTarget {
		tt := target(name, v1alpha1.KindConfigMap, object, bundleSource("corp", "ca.pem"))
		tt.Spec.Target.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "other"}}
		return tt
	}
	h := start(t, world{targets: []*v1alpha1.TrustTarget{
		target("a-roots", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem")),
		target("b-roots", v1alpha1.KindConfigMap, "roots", bundleSource("corp", "ca.pem")),
		target("a-more", v1alpha1.KindConfigMap, "more", bundleSource("corp", "ca.pem")),
		teamTarget("other-roots", "roots"),
	}, namespaces: []*corev1.Namespace{ns("apps", map[string]string{"trust": "corp"}), ns("other", map[string]string{"team": "other"})}}, Config{})
	queued := drainStarted(t, h, 4)
	u := func(name, object string) *unstructured.Unstructured {
		return unstructuredOf(t, target(name, v1alpha1.KindConfigMap, object, bundleSource("corp", "ca.pem")))
	}
	for _, tc := range []struct {
		name  string
		event func()
		want  []string
	}{
		{"a new target naming roots", func() { h.c.enqueueClaimants(u("c-roots", "roots")) }, []string{"a-roots", "b-roots", "c-roots"}},
		{"a new target naming an object no other names", func() { h.c.enqueueClaimants(u("lone", "elsewhere")) }, []string{"lone"}},
		{"a target moving from more to roots", func() { h.c.enqueueClaimants(u("a-more", "more"), u("a-more", "roots")) }, []string{"a-more", "a-roots", "b-roots"}},
		{"a target deleted, known by its tombstone", func() {
			h.c.enqueueClaimants(cache.DeletedFinalStateUnknown{Key: "b-roots", Obj: u("b-roots", "roots")})
		}, []string{"a-roots", "b-roots"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.event()
			if got := queued(); !slices.Equal(got, tc.want) {
				t.Errorf("enqueued %v, want %v", got, tc.want)
			}
		})
	}
}
