package grantcache

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/tenancy"
)

func ctb(api bundle.API, name, signer string, labels map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": api.GroupVersion.String(), "kind": "ClusterTrustBundle",
		"metadata": map[string]any{"name": name, "labels": labels}, "spec": map[string]any{"trustBundle": "PEM kept out of the cache"}}}
	if signer != "" {
		_ = unstructured.SetNestedField(u.Object, signer, "spec", "signerName")
	}
	return u
}

// The cache answers a namespace's grants, a bundle asked for by name (in either API,
// the mirror's named in its own form) with its signer and labels, and tells its
// listeners of a change: grant listeners of policies and namespaces alone.
func TestCache_AnswersGrantsAndBundlesAndTellsOfChanges(t *testing.T) {
	policy := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": v1alpha1.TrustPolicyKind,
		"metadata": map[string]any{"name": "team-a"},
		"spec": map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"team": "a"}},
			"bundles": []any{map[string]any{"signerName": "example.com/tenants", "labelSelector": map[string]any{"matchLabels": map[string]any{"tenant": "a"}}}}}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.TrustPolicyResource: "TrustPolicyList", bundle.NativeV1.GroupVersionResource(): "ClusterTrustBundleList", bundle.Mirror.GroupVersionResource(): "ClusterTrustBundleList"},
		policy,
		ctb(bundle.NativeV1, "example.com:tenants:a", "example.com/tenants", map[string]any{"tenant": "a"}),
		ctb(bundle.Mirror, "example.com--tenants--m", "example.com/tenants", map[string]any{"tenant": "b"}))
	scheme := runtime.NewScheme()
	_ = metav1.AddMetaToScheme(scheme)
	meta := metadatafake.NewSimpleMetadataClient(scheme, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: "ten-a", Labels: map[string]string{"team": "a"}}})
	c, err := New(dyn, meta, "trustsync-system", 0)
	if err != nil {
		t.Fatal(err)
	}
	native := bundle.NativeV1
	if err := c.WatchBundles(bundle.Served{Native: &native, Mirror: true}, 0); err != nil {
		t.Fatal(err)
	}
	var changes, grantChanges atomic.Int32
	c.OnChange(func() { changes.Add(1) })
	c.OnGrantsChange(func() { grantChanges.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return c.HasSynced(), nil }); err != nil {
		t.Fatal("the cache never synced")
	}

	g, exempt, err := c.For(ctx, "ten-a")
	if err != nil || exempt || len(g.Bundles) != 1 || g.Bundles[0].Policy != "team-a" {
		t.Fatalf("ten-a's grants = %+v (exempt %v, %v); want team-a's one grant", g, exempt, err)
	}
	if _, exempt, _ := c.For(ctx, "trustsync-system"); !exempt {
		t.Error("trustsync's own namespace is not exempt")
	}
	for _, tc := range []struct {
		name, wantSigner, wantTenant string
		found                        bool
	}{
		{name: "example.com:tenants:a", found: true, wantSigner: "example.com/tenants", wantTenant: "a"},
		{name: "example.com:tenants:m", found: true, wantSigner: "example.com/tenants", wantTenant: "b"}, // the mirror's example.com--tenants--m
		{name: "example.com:tenants:absent"},
	} {
		b, ok := c.Bundle(tc.name)
		if ok != tc.found || b.SignerName != tc.wantSigner || b.Labels["tenant"] != tc.wantTenant {
			t.Errorf("Bundle(%s) = %+v, %v; want found=%v, signer %q, tenant %q", tc.name, b, ok, tc.found, tc.wantSigner, tc.wantTenant)
		}
	}
	if _, err := g.Bundle(mustBundle(t, c, "example.com:tenants:a")); err != nil {
		t.Errorf("the bundle labelled tenant=a is not granted by the label grant: %v", err)
	}
	if _, err := g.Bundle(mustBundle(t, c, "example.com:tenants:m")); err == nil {
		t.Error("the bundle labelled tenant=b is granted by a grant of tenant=a")
	}
	if got := len(c.Bundles()); got != 2 {
		t.Errorf("Bundles() = %d, want 2", got)
	}
	for _, b := range c.Bundles() {
		if _, ok := c.Bundle(b.Name); !ok {
			t.Errorf("Bundles() names %s, which Bundle does not find: a mirror name not turned to upstream form", b.Name)
		}
	}

	// A bundle's change is news for the policies' status, not for the grants.
	beforeAll, beforeGrants := changes.Load(), grantChanges.Load()
	if _, err := dyn.Resource(bundle.NativeV1.GroupVersionResource()).Create(ctx, ctb(bundle.NativeV1, "example.com:tenants:c", "example.com/tenants", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return changes.Load() > beforeAll, nil }); err != nil {
		t.Fatal("a new bundle was not told to the listeners")
	}
	if grantChanges.Load() != beforeGrants {
		t.Error("a bundle's change was told to the grant listeners")
	}
	if err := dyn.Resource(v1alpha1.TrustPolicyResource).Delete(ctx, "team-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return grantChanges.Load() > beforeGrants, nil }); err != nil {
		t.Fatal("a policy's deletion was not told to the grant listeners")
	}
	if g, _, _ := c.For(ctx, "ten-a"); len(g.Bundles) != 0 {
		t.Errorf("after the policy went, ten-a is still granted %+v", g.Bundles)
	}
}

func mustBundle(t *testing.T, c *Cache, name string) tenancy.Bundle {
	t.Helper()
	b, ok := c.Bundle(name)
	if !ok {
		t.Fatalf("bundle %s not found", name)
	}
	return b
}
