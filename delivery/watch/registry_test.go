package watch

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

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

// rootSet is a registry over dyn and the set of one pipeline reading {"name": "root"}.
func rootSet(t *testing.T, dyn *dynamicfake.FakeDynamicClient) (*Registry, *Set, context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := New(ctx, dyn, nil)
	s, err := r.Acquire(Request{Bundles: map[string]tsbundle.Selector{"root": {Name: "root"}}})
	if err != nil {
		t.Fatal(err)
	}
	return r, s, ctx
}

// The served APIs change under a running sidecar: each change is followed, and the
// anchors are exactly those of the APIs served now.
func TestBundleWatches_FollowTheServedAPIs(t *testing.T) {
	nativeCA, mirrorCA := fixtures.CA("native"), fixtures.CA("mirror")
	dyn := fakeBundleClient(ctbObject(tsbundle.NativeV1, "root", fixtures.Bundle(nativeCA)), ctbObject(tsbundle.Mirror, "root", fixtures.Bundle(mirrorCA)))

	r, set, ctx := rootSet(t, dyn)
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
		changed, err := r.Follow(ctx, step.served, 0)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if changed != step.wantChanged {
			t.Errorf("%s: changed = %v, want %v", step.name, changed, step.wantChanged)
		}
		wantPool, gotPool := tsbundle.NewPool(), tsbundle.NewPool()
		for _, c := range step.want {
			wantPool.AddDER(c.Cert.Raw)
		}
		for _, b := range set.Bundles("root") {
			if err := gotPool.AddPEM([]byte(b.Spec.TrustBundle)); err != nil {
				t.Fatal(err)
			}
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
	r, set, ctx := rootSet(t, dyn)
	native := tsbundle.NativeV1
	if _, err := r.Follow(ctx, tsbundle.Served{Native: &native}, time.Second); err != nil {
		t.Fatal(err)
	}
	_, err := r.Follow(ctx, tsbundle.Served{Native: &native, Mirror: true}, 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "clustertrustbundles.v1alpha1.trustsync.io did not list within 200ms; check that the pod's ServiceAccount may list and watch it") {
		t.Fatalf("update = %v, want the API named and the likely cause", err)
	}
	if n := r.Watches(); n != 1 {
		t.Errorf("%d watches, want the native one alone", n)
	}
	if !set.WaitSynced(ctx) {
		t.Fatal("not synced")
	}
	if got := set.Bundles("root"); len(got) != 1 || got[0].Spec.TrustBundle != fixtures.Bundle(nativeCA) {
		t.Errorf("bundles = %v; want the native bundle", got)
	}
}

// Pipelines reading the same thing share one watch, which stops when the last lets go;
// the same object read with other credentials is another watch.
func TestRegistry_OneWatchPerDistinctSourceNotPerPipeline(t *testing.T) {
	dyn := fakeBundleClient(ctbObject(tsbundle.NativeV1, "root", fixtures.Bundle(fixtures.CA("root"))))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := New(ctx, dyn, nil)
	native := tsbundle.NativeV1
	if _, err := r.Follow(ctx, tsbundle.Served{Native: &native}, 0); err != nil {
		t.Fatal(err)
	}
	// Nothing answers here: the object watches retry, which is all this test needs.
	unreachable, err := rest.RESTClientFor(&rest.Config{Host: "http://127.0.0.1:1", ContentConfig: rest.ContentConfig{
		GroupVersion: &corev1.SchemeGroupVersion, NegotiatedSerializer: scheme.Codecs.WithoutConversion()}})
	if err != nil {
		t.Fatal(err)
	}
	pod := func(clientKey string) Request {
		return Request{Bundles: map[string]tsbundle.Selector{"root": {Name: "root"}}, Namespace: "apps",
			ConfigMaps: []string{"ca"}, Secrets: []string{"ca"}, Client: unreachable, ClientKey: clientKey}
	}
	var sets []*Set
	for range 50 {
		s, err := r.Acquire(pod("apps:sa"))
		if err != nil {
			t.Fatal(err)
		}
		sets = append(sets, s)
	}
	if n := r.Watches(); n != 3 {
		t.Fatalf("50 pipelines reading one bundle, one ConfigMap and one Secret run %d watches, want 3", n)
	}
	other, err := r.Acquire(pod("apps:other-sa"))
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Watches(); n != 5 {
		t.Errorf("another identity reading the same objects: %d watches, want 5 (its objects apart, the public bundle shared)", n)
	}
	other.Close()
	for _, s := range sets[1:] {
		s.Close()
	}
	if n := r.Watches(); n != 3 {
		t.Errorf("with one pipeline left: %d watches, want 3", n)
	}
	if !seesBundle(t, sets[0], "root") {
		t.Error("the remaining pipeline lost its bundle")
	}
	sets[0].Close()
	if n := r.Watches(); n != 0 {
		t.Errorf("with none left: %d watches, want 0", n)
	}
}

// seesBundle waits for s to hold the named bundle.
func seesBundle(t *testing.T, s *Set, name string) bool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, b := range s.Bundles("root") {
			if b.Name == name {
				return true
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// A watch that cannot list says why, so whoever waits for it (the node agent's
// publish) can tell the pod: the object named and the API server's own reason.
func TestSet_NotSyncedSaysWhyAWatchHasNotListed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "partner-ca", errors.New("RBAC: no")).ErrStatus
		status.APIVersion, status.Kind = "v1", "Status"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(status)
	}))
	defer srv.Close()
	client, err := rest.RESTClientFor(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{
		GroupVersion: &corev1.SchemeGroupVersion, NegotiatedSerializer: scheme.Codecs.WithoutConversion()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := New(ctx, nil, nil).Acquire(Request{Namespace: "apps", Secrets: []string{"partner-ca"}, Client: client, ClientKey: "pod"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := `Secret "partner-ca": secrets "partner-ca" is forbidden: RBAC: no`
	deadline := time.Now().Add(10 * time.Second)
	for {
		errs := s.NotSynced()
		if len(errs) == 1 && errs[0].Error() == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("NotSynced() = %v, want [%s]", errs, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s.HasSynced() {
		t.Error("a set whose Secret cannot be listed reports synced")
	}
}
