package sidecar

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/fixtures"
)

func ctbObject(api tsbundle.API, name, pem string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.GroupVersion.String(), "kind": "ClusterTrustBundle",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"trustBundle": pem},
	}}
}

// fakeBundleClient serves both bundle APIs holding objects.
func fakeBundleClient(objects ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		tsbundle.NativeV1.GroupVersionResource(): "ClusterTrustBundleList",
		tsbundle.Mirror.GroupVersionResource():   "ClusterTrustBundleList",
	}, objects...)
}

// watchesOfRoot watches the one source {"name": "root"} through dyn.
func watchesOfRoot(t *testing.T, dyn *dynamicfake.FakeDynamicClient) (*bundleWatches, *bundleSource) {
	t.Helper()
	sel := tsbundle.Selector{Name: "root"}
	match, err := sel.Matcher()
	if err != nil {
		t.Fatal(err)
	}
	src := &bundleSource{selector: sel, match: match}
	return &bundleWatches{dyn: dyn, sources: []*bundleSource{src}, lock: &sync.Mutex{}, apis: map[string]*apiWatch{},
		newInformer: func(lw cache.ListerWatcher) (cache.Store, watcher) {
			return newReflectorWatch(lw, &certificatesv1.ClusterTrustBundle{}, func() {})
		}}, src
}

// The served APIs change under a running sidecar: each change is followed, and the
// anchors are exactly those of the APIs served now.
func TestBundleWatches_FollowTheServedAPIs(t *testing.T) {
	nativeCA, mirrorCA := fixtures.CA("native"), fixtures.CA("mirror")
	dyn := fakeBundleClient(ctbObject(tsbundle.NativeV1, "root", fixtures.Bundle(nativeCA)), ctbObject(tsbundle.Mirror, "root", fixtures.Bundle(mirrorCA)))

	w, src := watchesOfRoot(t, dyn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	native := tsbundle.NativeV1

	steps := []struct {
		name        string
		served      tsbundle.Served
		wantChanged bool
		want        []*fixtures.Cert
	}{
		{name: "nothing served matches nothing", served: tsbundle.Served{}, wantChanged: false},
		{name: "the native API turned on is watched", served: tsbundle.Served{Native: &native}, wantChanged: true, want: []*fixtures.Cert{nativeCA}},
		{name: "the same APIs again change nothing", served: tsbundle.Served{Native: &native}, wantChanged: false, want: []*fixtures.Cert{nativeCA}},
		{name: "the mirror CRD installed is added to the union", served: tsbundle.Served{Native: &native, Mirror: true}, wantChanged: true, want: []*fixtures.Cert{nativeCA, mirrorCA}},
		{name: "an API no longer served stops contributing", served: tsbundle.Served{Mirror: true}, wantChanged: true, want: []*fixtures.Cert{mirrorCA}},
	}
	for _, step := range steps {
		changed, err := w.update(ctx, step.served, 0)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if changed != step.wantChanged {
			t.Errorf("%s: changed = %v, want %v", step.name, changed, step.wantChanged)
		}
		got, err := src.anchors(newDecoder())
		if len(step.want) == 0 {
			if err == nil {
				t.Errorf("%s: anchors %d, want a not-found error", step.name, len(got))
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		wantPool, gotPool := tsbundle.NewPool(), tsbundle.NewPool()
		for _, c := range step.want {
			wantPool.AddDER(c.Cert.Raw)
		}
		for _, a := range got {
			gotPool.AddDER(a.DER)
		}
		if string(gotPool.PEM()) != string(wantPool.PEM()) {
			t.Errorf("%s: anchors =\n%s\nwant\n%s", step.name, gotPool.PEM(), wantPool.PEM())
		}
	}
}

// A newly served API the pod may not list is left out with an error that says so, and
// the bundles already watched keep contributing.
func TestBundleWatches_AnAPIThatCannotListIsLeftOut(t *testing.T) {
	nativeCA := fixtures.CA("native")
	dyn := fakeBundleClient(ctbObject(tsbundle.NativeV1, "root", fixtures.Bundle(nativeCA)))
	dyn.PrependReactor("list", "clustertrustbundles", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetResource().Group == tsbundle.Mirror.GroupVersion.Group {
			return true, nil, apierrors.NewForbidden(action.GetResource().GroupResource(), "", errors.New("RBAC: no"))
		}
		return false, nil, nil
	})
	w, src := watchesOfRoot(t, dyn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	native := tsbundle.NativeV1
	if _, err := w.update(ctx, tsbundle.Served{Native: &native}, time.Second); err != nil {
		t.Fatal(err)
	}
	_, err := w.update(ctx, tsbundle.Served{Native: &native, Mirror: true}, 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "clustertrustbundles.v1alpha1.trustsync.io did not list within 200ms; check that the pod's ServiceAccount may list and watch it") {
		t.Fatalf("update = %v, want the API named and the likely cause", err)
	}
	if len(w.apis) != 1 || len(src.stores) != 1 {
		t.Errorf("watching %d APIs with %d stores, want the native one alone", len(w.apis), len(src.stores))
	}
	if got, err := src.anchors(newDecoder()); err != nil || len(got) != 1 {
		t.Errorf("anchors = %d, %v; want the native bundle's", len(got), err)
	}
}
