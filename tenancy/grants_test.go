package tenancy

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// The worked example of docs/tenancy.md: a platform team, its corporate root for
// everyone, and tenants granted their own signer's bundles and DNS names.
func policies(t *testing.T) []Policy {
	t.Helper()
	team := func(name string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"team": name}}
	}
	ps := Parse([]*v1alpha1.TrustPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "everyone"}, Spec: v1alpha1.TrustPolicySpec{NamespaceSelector: &metav1.LabelSelector{},
			Bundles: []v1alpha1.BundleGrant{{Name: "corp-root"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "payments"}, Spec: v1alpha1.TrustPolicySpec{NamespaceSelector: team("payments"),
			Bundles: []v1alpha1.BundleGrant{
				{SignerName: "trustsync.io/workload", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "payments"}}},
				{TrustDomain: "partner.example"}},
			Signers: []v1alpha1.SignerGrant{{SignerName: "trustsync.io/workload", DNSNames: []string{"*.payments.svc", "api.payments.example.com"}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "search"}, Spec: v1alpha1.TrustPolicySpec{NamespaceSelector: team("search"),
			Bundles: []v1alpha1.BundleGrant{{SignerName: "example.com/search"}}, Signers: []v1alpha1.SignerGrant{{SignerName: "trustsync.io/workload"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "broken"}, Spec: v1alpha1.TrustPolicySpec{NamespaceSelector: &metav1.LabelSelector{},
			Bundles: []v1alpha1.BundleGrant{{Name: "x", TrustDomain: "y.example"}}}},
	})
	if ps[0].Name != "broken" || ps[0].Err == nil {
		t.Fatalf("an invalid policy is not kept with its error: %+v", ps[0])
	}
	return ps
}

func TestGrants_AddUpOverThePoliciesSelectingTheNamespace(t *testing.T) {
	ps := policies(t)
	for _, tc := range []struct {
		name     string
		labels   map[string]string
		policies []string
	}{
		{"a namespace of no team gets what everyone gets", nil, []string{"everyone"}},
		{"a payments namespace gets everyone's and its team's", map[string]string{"team": "payments"}, []string{"everyone", "payments"}},
		{"an invalid policy grants nothing, even to every namespace", map[string]string{"team": "search"}, []string{"everyone", "search"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := For(ps, "ns", tc.labels)
			var got []string
			for _, b := range g.Bundles {
				if len(got) == 0 || got[len(got)-1] != b.Policy {
					got = append(got, b.Policy)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.policies, ",") {
				t.Errorf("granted by %v; want %v", got, tc.policies)
			}
		})
	}
}

func TestGrants_SourceIsAllowedOnlyWhenEverythingItCanSelectIsGranted(t *testing.T) {
	payments := For(policies(t), "ten-a", map[string]string{"team": "payments"})
	tenantLabels := &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "payments"}}
	lookup := func(name string) (Bundle, bool) {
		switch name {
		case "trustsync.io:workload:payments":
			return Bundle{Name: name, SignerName: "trustsync.io/workload", Labels: map[string]string{"tenant": "payments"}}, true
		case "trustsync.io:workload:search":
			return Bundle{Name: name, SignerName: "trustsync.io/workload", Labels: map[string]string{"tenant": "search"}}, true
		}
		return Bundle{}, false
	}
	for _, tc := range []struct {
		name string
		src  v1alpha1.Source
		says string // "" when allowed
	}{
		{name: "a bundle granted by name", src: v1alpha1.Source{Name: "corp-root"}},
		{name: "a bundle another team's policy grants", src: v1alpha1.Source{Name: "corp-b"},
			says: "namespace ten-a may not trust bundle corp-b: no TrustPolicy grants it; kubectl trustsync grants -n ten-a"},
		{name: "a bundle by name whose signer and labels a grant covers", src: v1alpha1.Source{Name: "trustsync.io:workload:payments"}},
		{name: "a bundle by name of the granted signer but another tenant's labels", src: v1alpha1.Source{Name: "trustsync.io:workload:search"},
			says: "may not trust bundle trustsync.io:workload:search"},
		{name: "the signer's bundles as narrowly as granted", src: v1alpha1.Source{SignerName: "trustsync.io/workload", LabelSelector: tenantLabels}},
		{name: "the signer's bundles more narrowly than granted", src: v1alpha1.Source{SignerName: "trustsync.io/workload",
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "payments", "kubernetes.io/cluster-trust-bundle-version": "live"}}}},
		{name: "all the signer's bundles when only some are granted", src: v1alpha1.Source{SignerName: "trustsync.io/workload", LabelSelector: &metav1.LabelSelector{}},
			says: "TrustPolicy payments grants only those selected by tenant=payments, and this selector may select others"},
		{name: "a federated peer's anchors granted by trust domain", src: v1alpha1.Source{SignerName: v1alpha1.FederatedSignerName,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.TrustDomainLabel: "partner.example"}}}},
		{name: "another peer's anchors", src: v1alpha1.Source{SignerName: v1alpha1.FederatedSignerName,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.TrustDomainLabel: "other.example"}}}, says: "grants only those selected by trustsync.io/trust-domain=partner.example"},
		{name: "a signer no policy names", src: v1alpha1.Source{SignerName: "example.com/search", LabelSelector: &metav1.LabelSelector{}},
			says: "may not trust the bundles of signer example.com/search: no TrustPolicy grants it"},
		{name: "a signer selector that selects nothing asks for nothing", src: v1alpha1.Source{SignerName: "example.com/other"}},
		{name: "the public roots are always allowed", src: v1alpha1.Source{DefaultCAs: true}},
		{name: "the namespace's own ConfigMap is always allowed", src: v1alpha1.Source{ConfigMap: &v1alpha1.KeyRef{Name: "cas", Key: "ca.crt"}}},
		{name: "the namespace's own Secret is always allowed", src: v1alpha1.Source{Secret: &v1alpha1.KeyRef{Name: "cas", Key: "ca.crt"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := payments.Source(tc.src, lookup)
			switch {
			case tc.says == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
				t.Fatalf("%v; want a refusal saying %q", err, tc.says)
			}
		})
	}
}

func TestGrants_CertificateOnlyForGrantedSignersAndDNSNames(t *testing.T) {
	ps := policies(t)
	payments := For(ps, "ten-a", map[string]string{"team": "payments"})
	search := For(ps, "ten-s", map[string]string{"team": "search"})
	nobody := For(ps, "ten-n", nil)
	for _, tc := range []struct {
		name   string
		g      Grants
		signer string
		dns    []string
		says   string
	}{
		{name: "a name the pattern matches", g: payments, signer: "trustsync.io/workload", dns: []string{"api.payments.svc"}},
		{name: "an exact name", g: payments, signer: "trustsync.io/workload", dns: []string{"api.payments.example.com", "web.payments.svc"}},
		{name: "no DNS name at all", g: payments, signer: "trustsync.io/workload"},
		{name: "'*' is one label, not several", g: payments, signer: "trustsync.io/workload", dns: []string{"a.b.payments.svc"},
			says: `TrustPolicy payments allows *.payments.svc, api.payments.example.com but not "a.b.payments.svc"`},
		{name: "another team's name", g: payments, signer: "trustsync.io/workload", dns: []string{"api.search.svc"}, says: `not "api.search.svc"`},
		{name: "a grant without DNS names allows only certificates without them", g: search, signer: "trustsync.io/workload", dns: []string{"x.search.svc"},
			says: `TrustPolicy search allows no DNS name but not "x.search.svc"`},
		{name: "a signer not granted", g: payments, signer: "example.com/other", says: "namespace ten-a may not ask example.com/other for certificates: no TrustPolicy grants it; kubectl trustsync grants -n ten-a"},
		{name: "a namespace no signer policy selects", g: nobody, signer: "trustsync.io/workload", says: "namespace ten-n may not ask trustsync.io/workload"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.g.Certificate(tc.signer, tc.dns)
			switch {
			case tc.says == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
				t.Fatalf("%v; want a refusal saying %q", err, tc.says)
			}
		})
	}
}

func TestGrants_CheckNamesTheFirstAskNotCoveredAndWhereItWasAsked(t *testing.T) {
	g := For(policies(t), "ten-a", map[string]string{"team": "a"})
	for _, tc := range []struct {
		name string
		asks []Ask
		want string // "" when every ask is granted
	}{
		{name: "nothing asked is granted", asks: nil},
		{name: "a namespace's own ConfigMap and the public roots need no grant",
			asks: []Ask{{Where: "annotation trustsync.io/sources", Source: &v1alpha1.Source{DefaultCAs: true, Path: "ca.pem"}},
				{Where: "annotation trustsync.io/sources", Source: &v1alpha1.Source{ConfigMap: &v1alpha1.KeyRef{Name: "mine", Key: "ca.pem"}, Path: "mine.pem"}}}},
		{name: "an ungranted bundle is named with where it was asked",
			asks: []Ask{{Where: "volume roots (projected clusterTrustBundle)", Source: &v1alpha1.Source{Name: "corp-b", Path: "ca.pem"}}},
			want: "volume roots (projected clusterTrustBundle): namespace ten-a may not trust bundle corp-b: no TrustPolicy grants it; kubectl trustsync grants -n ten-a"},
		{name: "an ungranted signer is named",
			asks: []Ask{{Where: "volume cert (projected podCertificate)", Signer: "example.com/other"}},
			want: "volume cert (projected podCertificate): namespace ten-a may not ask example.com/other for certificates: no TrustPolicy grants it; kubectl trustsync grants -n ten-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := g.Check(tc.asks, nil)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Errorf("error %v;\nwant %s", err, tc.want)
			}
		})
	}
}

// A bundle asked for by name that does not exist yet carries no labels, so a label
// selector cannot tell whether it will be granted: a negative one would match its
// empty labels and grant a bundle later labelled against it. It is granted by its
// name, or by a grant of all its signer's bundles, and no other way.
func TestGrants_ABundleNotYetThereIsGrantedByNameOrByAllOfItsSignersBundles(t *testing.T) {
	grant := func(b v1alpha1.BundleGrant) Grants {
		return For(Parse([]*v1alpha1.TrustPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec: v1alpha1.TrustPolicySpec{NamespaceSelector: &metav1.LabelSelector{}, Bundles: []v1alpha1.BundleGrant{b}}}}), "ten-a", nil)
	}
	notRestricted := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"restricted"}}}}
	noTier := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}}}
	const name = "example.com:s:future"
	for _, tc := range []struct {
		grant   v1alpha1.BundleGrant
		what    string
		granted bool
	}{
		{v1alpha1.BundleGrant{Name: name}, "by its name", true},
		{v1alpha1.BundleGrant{SignerName: "example.com/s"}, "by all of its signer's bundles", true},
		{v1alpha1.BundleGrant{SignerName: "example.com/s", LabelSelector: notRestricted}, "not by a NotIn selector", false},
		{v1alpha1.BundleGrant{SignerName: "example.com/s", LabelSelector: noTier}, "not by a DoesNotExist selector", false},
		{v1alpha1.BundleGrant{SignerName: "example.com/s", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "open"}}}, "not by a label it may get", false},
	} {
		t.Run(tc.what, func(t *testing.T) {
			err := grant(tc.grant).Source(v1alpha1.Source{Name: name}, func(string) (Bundle, bool) { return Bundle{}, false })
			if (err == nil) != tc.granted {
				t.Errorf("Source = %v; want granted %v", err, tc.granted)
			}
		})
	}
	// Once it exists, its labels decide.
	exists := func(string) (Bundle, bool) {
		return Bundle{Name: name, SignerName: "example.com/s", Labels: map[string]string{"tier": "open"}}, true
	}
	if err := grant(v1alpha1.BundleGrant{SignerName: "example.com/s", LabelSelector: notRestricted}).Source(v1alpha1.Source{Name: name}, exists); err != nil {
		t.Errorf("an existing bundle its labels let through: %v", err)
	}
}
