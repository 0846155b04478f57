package v1alpha1

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseTrustPolicySpec_SaysWhatIsWrongWithTheOffendingValue(t *testing.T) {
	all := &metav1.LabelSelector{}
	for _, tc := range []struct {
		name string
		spec TrustPolicySpec
		says string // "" when valid
	}{
		{name: "every kind of grant", spec: TrustPolicySpec{NamespaceSelector: all,
			Bundles: []BundleGrant{{Name: "corp-root"}, {SignerName: "example.com/s"}, {SignerName: "example.com/s", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"t": "a"}}}, {TrustDomain: "partner.example"}},
			Signers: []SignerGrant{{SignerName: "trustsync.io/workload", DNSNames: []string{"*.payments.svc", "api.*.example.com", "exact.example.com"}}, {SignerName: "example.com/s"}}}},
		{name: "no namespace selector", spec: TrustPolicySpec{Bundles: []BundleGrant{{Name: "a"}}}, says: "spec.namespaceSelector: Required value"},
		{name: "a bad namespace selector", spec: TrustPolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Near"}}}, Bundles: []BundleGrant{{Name: "a"}}},
			says: "spec.namespaceSelector"},
		{name: "nothing granted", spec: TrustPolicySpec{NamespaceSelector: all}, says: "grant at least one bundle or signer"},
		{name: "two kinds in one grant", spec: TrustPolicySpec{NamespaceSelector: all, Bundles: []BundleGrant{{Name: "a", TrustDomain: "b.example"}}},
			says: `spec.bundles[0]: Invalid value: "name, trustDomain": give exactly one of name, signerName and trustDomain`},
		{name: "a selector without a signer", spec: TrustPolicySpec{NamespaceSelector: all, Bundles: []BundleGrant{{Name: "a", LabelSelector: all}}},
			says: "labelSelector goes with signerName only"},
		{name: "a trust domain go-spiffe refuses", spec: TrustPolicySpec{NamespaceSelector: all, Bundles: []BundleGrant{{TrustDomain: "Partner.Example"}}},
			says: `spec.bundles[0].trustDomain: Invalid value: "Partner.Example"`},
		{name: "a bad bundle name", spec: TrustPolicySpec{NamespaceSelector: all, Bundles: []BundleGrant{{Name: "Bad_Name"}}}, says: `spec.bundles[0].name`},
		{name: "a bad signer name", spec: TrustPolicySpec{NamespaceSelector: all, Signers: []SignerGrant{{SignerName: "no-domain"}}}, says: "spec.signers[0].signerName"},
		{name: "a '*' inside a label", spec: TrustPolicySpec{NamespaceSelector: all, Signers: []SignerGrant{{SignerName: "example.com/s", DNSNames: []string{"api-*.example.com"}}}},
			says: `spec.signers[0].dnsNames[0]: Invalid value: "api-*.example.com": label "api-*"`},
		{name: "an uppercase DNS name", spec: TrustPolicySpec{NamespaceSelector: all, Signers: []SignerGrant{{SignerName: "example.com/s", DNSNames: []string{"API.example.com"}}}},
			says: `label "API"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parsed, err := ParseTrustPolicySpec(&tc.spec)
			switch {
			case tc.says == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
				t.Fatalf("%v; want it to say %q", err, tc.says)
			case err == nil && len(parsed.Bundles) != len(tc.spec.Bundles):
				t.Fatalf("parsed %d bundle grants of %d", len(parsed.Bundles), len(tc.spec.Bundles))
			}
		})
	}
}
