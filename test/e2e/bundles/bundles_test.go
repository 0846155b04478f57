package bundles

import (
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

func discover(t *testing.T, cfg *rest.Config) bundle.Served {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served, err := bundleapi.Discover(dc)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	return served
}

func store(t *testing.T, cfg *rest.Config, api bundle.API) *bundleapi.Store {
	t.Helper()
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return bundleapi.NewStore(client, api)
}

func newBundle(name, signer string, labels map[string]string, anchors ...*fixtures.Cert) *certificatesv1.ClusterTrustBundle {
	return &certificatesv1.ClusterTrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: fixtures.Bundle(anchors...)},
	}
}

// storeFor returns the store a mode's bundles live in, installing the mirror CRD in
// the mode without the native API.
func storeFor(t *testing.T, cp *controlplane.ControlPlane, native bool) *bundleapi.Store {
	t.Helper()
	if !native {
		if err := cp.InstallMirrorCRD(controlplane.Context(t)); err != nil {
			t.Fatal(err)
		}
	}
	api, ok := discover(t, cp.AdminConfig()).Writer()
	if !ok {
		t.Fatal("no bundle API served")
	}
	return store(t, cp.AdminConfig(), api)
}

func TestDiscover_NativeModeServesV1(t *testing.T) {
	served := discover(t, cluster(t, true).AdminConfig())
	if served.Native == nil || *served.Native != bundle.NativeV1 {
		t.Fatalf("Native = %v, want %v", served.Native, bundle.NativeV1)
	}
}

func TestDiscover_NoNativeModeServesOnlyTheMirrorOnceInstalled(t *testing.T) {
	cp := cluster(t, false)
	if served := discover(t, cp.AdminConfig()); served.Native != nil {
		t.Fatalf("Native = %v, want none with the ClusterTrustBundle gate off", served.Native)
	}
	if err := cp.InstallMirrorCRD(controlplane.Context(t)); err != nil {
		t.Fatal(err)
	}
	served := discover(t, cp.AdminConfig())
	if served.Native != nil || !served.Mirror {
		t.Fatalf("served = %+v, want the mirror alone", served)
	}
	if api, _ := served.Writer(); api != bundle.Mirror {
		t.Fatalf("Writer() = %v, want the mirror", api)
	}
}

// Both modes: a bundle is created in upstream form, stored in the API's own form, and
// read back through a server-side spec.signerName field selector that leaves other
// signers' bundles out.
func TestStore_CreateAndListBySignerFieldSelector(t *testing.T) {
	for _, native := range []bool{true, false} {
		t.Run(mode(native), func(t *testing.T) {
			ctx := controlplane.Context(t)
			s := storeFor(t, cluster(t, native), native)
			live := map[string]string{"kubernetes.io/cluster-trust-bundle-version": "live"}
			want := newBundle("example.com:server-tls:live", "example.com/server-tls", live, fixtures.CA("server-tls"))
			for _, b := range []*certificatesv1.ClusterTrustBundle{
				want,
				newBundle("example.com:server-tls:old", "example.com/server-tls", nil, fixtures.CA("server-tls old")),
				newBundle("example.org:other:live", "example.org/other", live, fixtures.CA("other")),
				newBundle("corp-root", "", nil, fixtures.CA("corp")),
			} {
				if _, err := s.Create(ctx, b, metav1.CreateOptions{}); err != nil {
					t.Fatalf("Create %q: %v", b.Name, err)
				}
			}

			sel := bundle.Selector{SignerName: "example.com/server-tls", LabelSelector: &metav1.LabelSelector{MatchLabels: live}}
			opts, ok, err := sel.ListOptions(s.API().Form)
			if err != nil || !ok {
				t.Fatalf("ListOptions = %v, %v", ok, err)
			}
			list, err := s.List(ctx, opts)
			if err != nil {
				t.Fatalf("List(%+v): %v", opts, err)
			}
			if len(list.Items) != 1 || list.Items[0].Name != want.Name || list.Items[0].Spec.TrustBundle != want.Spec.TrustBundle {
				t.Fatalf("List(%+v) = %v, want only %q", opts, names(list.Items), want.Name)
			}

			bySigner, _, _ := bundle.Selector{SignerName: "example.com/server-tls", LabelSelector: &metav1.LabelSelector{}}.ListOptions(s.API().Form)
			all, err := s.List(ctx, bySigner)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(all.Items); len(got) != 2 {
				t.Fatalf("empty selector listed %v, want both of the signer's bundles", got)
			}

			got, err := s.Get(ctx, "corp-root")
			if err != nil || got.Spec.SignerName != "" {
				t.Fatalf("Get(corp-root) = %v, %v", got, err)
			}
		})
	}
}

// The mirror keeps "--" in object names; users and readers only ever see ":".
func TestStore_MirrorObjectsAreNamedWithDashes(t *testing.T) {
	cp := cluster(t, false)
	ctx := controlplane.Context(t)
	s := storeFor(t, cp, false)
	if _, err := s.Create(ctx, newBundle("xn--bcher-kva.example:s:v1", "xn--bcher-kva.example/s", nil, fixtures.CA("idn")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	raw, err := dynamicClient(t, cp).Resource(bundle.Mirror.GroupVersionResource()).Get(ctx, "xn--bcher-kva.example--s--v1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the mirror object is not stored under its dashed name: %v", err)
	}
	if got := raw.GetName(); got != "xn--bcher-kva.example--s--v1" {
		t.Fatalf("stored name = %q", got)
	}
	got, err := s.Get(ctx, "xn--bcher-kva.example:s:v1")
	if err != nil || got.Name != "xn--bcher-kva.example:s:v1" {
		t.Fatalf("Get by upstream name = %v, %v", got, err)
	}
}

// The mirror CRD's own rule keeps spec.signerName immutable even with no webhook:
// changing, removing and adding it are all refused.
func TestMirrorCRD_SignerNameIsImmutable(t *testing.T) {
	cp := cluster(t, false)
	ctx := controlplane.Context(t)
	s := storeFor(t, cp, false)
	signed, err := s.Create(ctx, newBundle("example.com:immutable:live", "example.com/immutable", nil, fixtures.CA("a")), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unsigned, err := s.Create(ctx, newBundle("immutable-unsigned", "", nil, fixtures.CA("b")), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		from   *certificatesv1.ClusterTrustBundle
		signer string
	}{
		{"changed", signed, "example.com/other"},
		{"removed", signed, ""},
		{"added", unsigned, "example.com/immutable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.from.DeepCopy()
			b.Spec.SignerName = tc.signer
			_, err := s.Update(ctx, b, metav1.UpdateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.signerName: Invalid value") || !strings.Contains(err.Error(), "field is immutable") {
				t.Fatalf("Update with signerName %q: err = %v, want spec.signerName invalid: field is immutable", tc.signer, err)
			}
		})
	}
}

// An authenticated user that RBAC grants nothing may neither read nor write bundles.
func TestRBAC_UnprivilegedUserIsForbidden(t *testing.T) {
	for _, native := range []bool{true, false} {
		t.Run(mode(native), func(t *testing.T) {
			cp := cluster(t, native)
			ctx := controlplane.Context(t)
			api := storeFor(t, cp, native).API()
			s := store(t, cp.UserConfig("mallory", "e2e-unprivileged"), api)
			if _, err := s.Create(ctx, newBundle("mallory-root", "", nil, fixtures.CA("mallory")), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
				t.Fatalf("Create as mallory: err = %v, want Forbidden", err)
			}
			if _, err := s.List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
				t.Fatalf("List as mallory: err = %v, want Forbidden", err)
			}
		})
	}
}

// Watch events carry bundles converted to the v1 type with upstream names, so one
// informer type serves every API.
func TestStore_WatchDeliversConvertedBundles(t *testing.T) {
	for _, native := range []bool{true, false} {
		t.Run(mode(native), func(t *testing.T) {
			ctx := controlplane.Context(t)
			s := storeFor(t, cluster(t, native), native)
			opts, _, _ := bundle.Selector{SignerName: "example.com/watched", LabelSelector: &metav1.LabelSelector{}}.ListOptions(s.API().Form)
			w, err := s.Watch(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			if _, err := s.Create(ctx, newBundle("example.com:watched:live", "example.com/watched", nil, fixtures.CA("w")), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			select {
			case ev := <-w.ResultChan():
				b, ok := ev.Object.(*certificatesv1.ClusterTrustBundle)
				if ev.Type != watch.Added || !ok || b.Name != "example.com:watched:live" {
					t.Fatalf("event = %s %#v, want Added example.com:watched:live", ev.Type, ev.Object)
				}
			case <-ctx.Done():
				t.Fatal("no watch event")
			}
		})
	}
}

// The harness can stop and restart kube-apiserver over the same etcd and address
// (the sidecar's outage tests rely on it): objects survive, clients reconnect.
func TestHarness_APIServerRestartKeepsObjects(t *testing.T) {
	cp := cluster(t, true)
	ctx := controlplane.Context(t)
	s := storeFor(t, cp, true)
	if _, err := s.Create(ctx, newBundle("restart-survivor", "", nil, fixtures.CA("r")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cp.StopAPIServer()
	if _, err := s.Get(ctx, "restart-survivor"); err == nil {
		t.Fatal("Get succeeded with kube-apiserver stopped")
	}
	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "restart-survivor"); err != nil {
		t.Fatalf("Get after restart: %v", err)
	}
}

func dynamicClient(t *testing.T, cp *controlplane.ControlPlane) dynamic.Interface {
	c, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func names(items []certificatesv1.ClusterTrustBundle) []string {
	var out []string
	for _, b := range items {
		out = append(out, b.Name)
	}
	return out
}

func mode(native bool) string {
	if native {
		return "native"
	}
	return "no-native"
}
