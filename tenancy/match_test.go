package tenancy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// A trust domain's grant is the federated signer's bundle labelled with it, and a
// signer's grant without a selector covers all its bundles.
func TestParsedBundleGrant_GrantsWhatItNames(t *testing.T) {
	parsed, err := v1alpha1.ParseTrustPolicySpec(&v1alpha1.TrustPolicySpec{NamespaceSelector: &metav1.LabelSelector{},
		Bundles: []v1alpha1.BundleGrant{{Name: "corp-root"}, {SignerName: "example.com/s"}, {TrustDomain: "partner.example"}}})
	if err != nil {
		t.Fatal(err)
	}
	byName, bySigner, byDomain := parsed.Bundles[0], parsed.Bundles[1], parsed.Bundles[2]
	for _, tc := range []struct {
		name         string
		grant        v1alpha1.ParsedBundleGrant
		bundle, sig  string
		bundleLabels map[string]string
		want         bool
	}{
		{"the bundle named", byName, "corp-root", "", nil, true},
		{"another bundle", byName, "corp-b", "", nil, false},
		{"any bundle of the signer", bySigner, "example.com:s:x", "example.com/s", map[string]string{"any": "thing"}, true},
		{"another signer's", bySigner, "example.com:t:x", "example.com/t", nil, false},
		{"the peer's imported anchors", byDomain, v1alpha1.FederatedBundleName("partner.example"), v1alpha1.FederatedSignerName, map[string]string{v1alpha1.TrustDomainLabel: "partner.example"}, true},
		{"another peer's", byDomain, v1alpha1.FederatedBundleName("other.example"), v1alpha1.FederatedSignerName, map[string]string{v1alpha1.TrustDomainLabel: "other.example"}, false},
	} {
		if got := grantsBundle(tc.grant, tc.bundle, tc.sig, tc.bundleLabels); got != tc.want {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
	}
	if byDomain.TrustDomain.String() != "partner.example" || byDomain.Labels.String() != labels.SelectorFromSet(labels.Set{v1alpha1.TrustDomainLabel: "partner.example"}).String() {
		t.Errorf("the trust domain's grant is %+v", byDomain)
	}
}

// One rule for every DNS pattern: a "*" is one whole, non-empty label, never
// several, never part of one, and a requested "*" (a wildcard certificate) matches
// nothing; case does not matter. The signer's policy-file patterns follow it too.
func TestMatchDNSName_StarIsOneWholeLabel(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"*.payments.svc", "api.payments.svc", true},
		{"*.payments.svc", "API.payments.svc", true},
		{"*.Payments.svc", "api.payments.svc", true},
		{"*.payments.svc", "a.b.payments.svc", false},
		{"*.payments.svc", "payments.svc", false},
		{"*.payments.svc", ".payments.svc", false},
		{"*.payments.svc", "*.payments.svc", false},
		{"api.*.example.com", "api.eu.example.com", true},
		{"exact.example.com", "exact.example.com", true},
		{"exact.example.com", "other.example.com", false},
		{"*.apps.svc.cluster.local", "web.apps.svc.cluster.local", true},
		{"*", "web", true},
		{"*", "web.apps", false},
	} {
		if got := MatchDNSName(tc.pattern, tc.name); got != tc.want {
			t.Errorf("MatchDNSName(%q, %q) = %v; want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}
