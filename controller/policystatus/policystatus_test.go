package policystatus

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/tenancy"
)

func TestOf_CountsTheNamespacesSelectedAndNamesWhatDoesNotResolve(t *testing.T) {
	namespaces := []map[string]string{{"team": "a"}, {"team": "a", "env": "prod"}, {"team": "b"}, nil}
	bundles := []tenancy.Bundle{
		{Name: "corp-root"},
		{Name: "example.com:tenants:a", SignerName: "example.com/tenants", Labels: map[string]string{"tenant": "a"}},
		{Name: "trustsync.io:federated:partner", SignerName: v1alpha1.FederatedSignerName, Labels: map[string]string{v1alpha1.TrustDomainLabel: "partner.example"}},
	}
	team := func(name string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"team": name}}
	}
	tenant := func(name string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": name}}
	}
	for _, tc := range []struct {
		name           string
		spec           v1alpha1.TrustPolicySpec
		wantNamespaces int
		wantReady      metav1.ConditionStatus
		wantReason     string
		wantUnresolved []string
	}{
		{name: "every grant refers to something that exists: Resolved",
			spec: v1alpha1.TrustPolicySpec{NamespaceSelector: team("a"), Bundles: []v1alpha1.BundleGrant{
				{Name: "corp-root"}, {SignerName: "example.com/tenants", LabelSelector: tenant("a")}, {TrustDomain: "partner.example"}}},
			wantNamespaces: 2, wantReady: metav1.ConditionTrue, wantReason: v1alpha1.ReasonResolved},
		{name: "an empty selector selects every namespace",
			spec:           v1alpha1.TrustPolicySpec{NamespaceSelector: &metav1.LabelSelector{}, Bundles: []v1alpha1.BundleGrant{{Name: "corp-root"}}},
			wantNamespaces: 4, wantReady: metav1.ConditionTrue, wantReason: v1alpha1.ReasonResolved},
		{name: "grants naming nothing yet are named, and granted all the same",
			spec: v1alpha1.TrustPolicySpec{NamespaceSelector: team("b"), Bundles: []v1alpha1.BundleGrant{
				{Name: "corp-later"}, {SignerName: "example.com/tenants", LabelSelector: tenant("b")}, {SignerName: "example.com/none"}, {TrustDomain: "other.example"}},
				Signers: []v1alpha1.SignerGrant{{SignerName: "trustsync.io/workload"}}},
			wantNamespaces: 1, wantReady: metav1.ConditionTrue, wantReason: v1alpha1.ReasonUnresolved,
			wantUnresolved: []string{
				"bundles[0]: bundle corp-later does not exist",
				"bundles[1]: signer example.com/tenants has no bundle selected by tenant=b",
				"bundles[2]: signer example.com/none has no bundle",
				"bundles[3]: trust domain other.example is not federated (no bundle of trustsync.io/federated labelled trustsync.io/trust-domain=other.example)",
			}},
		{name: "an invalid spec grants nothing and is not Ready",
			spec:      v1alpha1.TrustPolicySpec{Bundles: []v1alpha1.BundleGrant{{Name: "corp-root"}}},
			wantReady: metav1.ConditionFalse, wantReason: v1alpha1.ReasonInvalidSpec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1alpha1.TrustPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 3}, Spec: tc.spec}
			got := Of(p, namespaces, bundles)
			if got.Namespaces != tc.wantNamespaces || got.ObservedGeneration != 3 {
				t.Errorf("namespaces = %d (generation %d), want %d (3)", got.Namespaces, got.ObservedGeneration, tc.wantNamespaces)
			}
			if strings.Join(got.Unresolved, "\n") != strings.Join(tc.wantUnresolved, "\n") {
				t.Errorf("unresolved =\n  %s\nwant\n  %s", strings.Join(got.Unresolved, "\n  "), strings.Join(tc.wantUnresolved, "\n  "))
			}
			c := meta.FindStatusCondition(got.Conditions, v1alpha1.ConditionReady)
			if c == nil || c.Status != tc.wantReady || c.Reason != tc.wantReason {
				t.Fatalf("Ready = %+v, want %s %s", c, tc.wantReady, tc.wantReason)
			}
		})
	}
}
