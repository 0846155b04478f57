package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/tenancy"
)

// grants prints, per namespace, each grant as the policy wrote it, with the policy's
// name; a namespace no policy selects says so with empty lists, never null.
func TestGrantsOf_EachGrantWithThePolicyThatMakesIt(t *testing.T) {
	policies := tenancy.Parse([]*v1alpha1.TrustPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "everyone"}, Spec: v1alpha1.TrustPolicySpec{NamespaceSelector: &metav1.LabelSelector{},
			Bundles: []v1alpha1.BundleGrant{{Name: "corp-root"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "payments"}, Spec: v1alpha1.TrustPolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}},
			Bundles: []v1alpha1.BundleGrant{{SignerName: "trustsync.io/workload", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "payments"}}},
				{SignerName: "example.com/all"}, {TrustDomain: "partner.example"}},
			Signers: []v1alpha1.SignerGrant{{SignerName: "trustsync.io/workload", DNSNames: []string{"*.payments.svc"}}, {SignerName: "example.com/ids"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}, Spec: v1alpha1.TrustPolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "none"}},
			Bundles: []v1alpha1.BundleGrant{{Name: "x"}}}},
	})
	got := grantsOf(policies, []metav1.ObjectMeta{{Name: "ten-a", Labels: map[string]string{"team": "payments"}}, {Name: "default"}})
	want := []NamespaceGrants{
		{Namespace: "default", Bundles: []GrantedBundle{{Name: "corp-root", Policy: "everyone"}}, Signers: []GrantedSigner{}},
		{Namespace: "ten-a", Bundles: []GrantedBundle{
			{Name: "corp-root", Policy: "everyone"},
			{SignerName: "trustsync.io/workload", LabelSelector: "tenant=payments", Policy: "payments"},
			{SignerName: "example.com/all", Policy: "payments"},
			{TrustDomain: "partner.example", Policy: "payments"},
		}, Signers: []GrantedSigner{
			{SignerName: "trustsync.io/workload", DNSNames: []string{"*.payments.svc"}, Policy: "payments"},
			{SignerName: "example.com/ids", DNSNames: []string{}, Policy: "payments"},
		}},
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("grants:\n%s\nwant\n%s", g, w)
	}
}

// A kind the cluster does not serve, or the user may not read, is said with what to do.
func TestListKind_SaysWhatToDoWhenNotServedOrNotReadable(t *testing.T) {
	gr := v1alpha1.TrustPolicyResource.GroupResource()
	for _, tc := range []struct {
		name string
		err  error
		says string
	}{
		{"not served", apierrors.NewNotFound(gr, ""), "TrustPolicies are not served here: install the chart's CRDs (files/crds/trustpolicies.trustsync.io.yaml, or trustsync-crds.yaml of a release)"},
		{"not readable", apierrors.NewForbidden(gr, "", errors.New("no")), "kubectl trustsync grants reads TrustPolicies (cluster-scoped) with your credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{v1alpha1.TrustPolicyResource: "TrustPolicyList"})
			dyn.PrependReactor("list", "trustpolicies", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
			_, err := listKind(context.Background(), dyn, v1alpha1.TrustPolicyResource, "TrustPolicies", "grants")
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("%v; want it to say %q", err, tc.says)
			}
		})
	}
}
