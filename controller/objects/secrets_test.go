package objects

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

func TestPermitsSecret_OnlyTheNamesWhereNamed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		allowed bool
		names   []string
		secret  string
		want    bool
	}{
		{"Secrets not allowed", false, nil, "roots", false},
		{"every Secret", true, nil, "roots", true},
		{"a listed name", true, []string{"roots", "other"}, "other", true},
		{"a name not listed", true, []string{"roots"}, "rootsx", false},
		{"names without Secrets allowed", false, []string{"roots"}, "roots", false},
	} {
		if got := PermitsSecret(tc.allowed, tc.names, tc.secret); got != tc.want {
			t.Errorf("%s: permitsSecret(%v, %v, %q) = %v", tc.name, tc.allowed, tc.names, tc.secret, got)
		}
	}
}

// One watch per name, read as one: a Secret is found in whichever watch holds it,
// a missing one is NotFound, and a list is their union.
func TestSecretListers_ReadOneWatchPerNameAsOne(t *testing.T) {
	watch := func(secrets ...*corev1.Secret) corelisters.SecretLister {
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		for _, s := range secrets {
			_ = idx.Add(s)
		}
		return corelisters.NewSecretLister(idx)
	}
	secret := func(ns, name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"t": "x"}}}
	}
	l := SecretListers{watch(secret("a", "roots"), secret("b", "roots")), watch(secret("a", "other"))}
	if s, err := l.Get("a", "other"); err != nil || s.Name != "other" {
		t.Errorf("get a/other: %v, %v", s, err)
	}
	if _, err := l.Get("b", "other"); !apierrors.IsNotFound(err) {
		t.Errorf("get b/other: %v, want NotFound", err)
	}
	if all, err := l.List(labels.SelectorFromSet(labels.Set{"t": "x"})); err != nil || len(all) != 3 {
		t.Errorf("list: %d, %v; want the 3 of both watches", len(all), err)
	}

	metas := func(objs ...*corev1.Secret) cache.GenericLister {
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		for _, o := range objs {
			_ = idx.Add(o)
		}
		return cache.NewGenericLister(idx, corev1.Resource("secrets"))
	}
	g := GenericListers{metas(secret("a", "roots")), metas(secret("a", "other"))}
	if obj, err := g.ByNamespace("a").Get("other"); err != nil || obj.(*corev1.Secret).Name != "other" {
		t.Errorf("ByNamespace(a).Get(other): %v, %v", obj, err)
	}
	if _, err := g.ByNamespace("b").Get("roots"); !apierrors.IsNotFound(err) {
		t.Errorf("ByNamespace(b).Get(roots): %v, want NotFound", err)
	}
	if all, err := g.List(labels.Everything()); err != nil || len(all) != 2 {
		t.Errorf("List: %d, %v", len(all), err)
	}

	s1, s2 := cache.NewStore(cache.MetaNamespaceKeyFunc), cache.NewStore(cache.MetaNamespaceKeyFunc)
	_ = s1.Add(secret("a", "roots"))
	_ = s2.Add(secret("a", "other"))
	st := Stores{s1, s2}
	if _, ok, _ := st.GetByKey("a/other"); !ok {
		t.Error("GetByKey(a/other) found nothing")
	}
	if _, ok, _ := st.GetByKey("a/missing"); ok {
		t.Error("GetByKey(a/missing) found something")
	}
	if n := len(st.List()); n != 2 {
		t.Errorf("List: %d, want 2", n)
	}
}

// Both controllers read the Secrets (and ConfigMaps) through one ObjectMeta: a kind,
// or an allowed Secret name, costs one watch however many read it.
func TestObjectMeta_TwoReadersCostOneWatchAKindOrName(t *testing.T) {
	for _, tc := range []struct {
		name        string
		secretNames []string
		wantSecrets []string // the field selectors of the Secret watches
	}{
		{name: "every Secret: one watch", wantSecrets: []string{""}},
		{name: "two names: one watch each, selected by name", secretNames: []string{"trust-roots", "ca"}, wantSecrets: []string{"metadata.name=trust-roots", "metadata.name=ca"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
			m := NewObjectMeta(client, 0, tc.secretNames)
			var synced []cache.InformerSynced
			for range 2 { // the TrustTarget controller and the injection
				for _, inf := range append(m.Secrets(), m.For(ConfigMap)) {
					_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{})
					synced = append(synced, inf.Informer().HasSynced)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			m.Start(ctx.Done())
			m.Start(ctx.Done()) // each controller starts them
			if !cache.WaitForCacheSync(ctx.Done(), synced...) {
				t.Fatal("the watches did not sync")
			}
			var secrets []string
			configMaps := 0
			for _, a := range client.Actions() {
				w, ok := a.(k8stesting.WatchActionImpl)
				if !ok {
					continue
				}
				switch a.GetResource().Resource {
				case "secrets":
					secrets = append(secrets, w.GetWatchRestrictions().Fields.String())
				case "configmaps":
					configMaps++
				}
			}
			slices.Sort(secrets)
			want := slices.Sorted(slices.Values(tc.wantSecrets))
			if !slices.Equal(secrets, want) || configMaps != 1 {
				t.Errorf("Secret watches %q and %d ConfigMap watches; want %q and 1", secrets, configMaps, want)
			}
		})
	}
}
