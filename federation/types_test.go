package federation

import (
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustsync/trustsync/test/fixtures"
)

func TestSpec_ValidateSaysWhatIsWrongWithTheOffendingValue(t *testing.T) {
	pem := fixtures.Bundle(fixtures.CA("b"))
	good := Spec{TrustDomain: "b.example", BundleEndpointURL: "https://signer.b.example:8443/b.example",
		BundleEndpointProfile: Profile{Type: ProfileSPIFFE, EndpointSPIFFEID: EndpointID("b.example")}, TrustDomainBundle: pem}
	for _, tc := range []struct {
		name   string
		change func(*Spec)
		says   string
	}{
		{"a trustsync peer", func(*Spec) {}, ""},
		{"https_web needs no bundle", func(s *Spec) { s.BundleEndpointProfile = Profile{Type: ProfileWeb}; s.TrustDomainBundle = "" }, ""},
		{"a scheme in the trust domain", func(s *Spec) { s.TrustDomain = "spiffe://b.example" }, "without scheme"},
		{"an uppercase trust domain", func(s *Spec) { s.TrustDomain = "B.example" }, "B.example"},
		{"'--' in the trust domain", func(s *Spec) {
			s.TrustDomain = "xn--b.example"
			s.BundleEndpointProfile.EndpointSPIFFEID = EndpointID("xn--b.example")
		}, "may not contain"},
		{"a trust domain longer than a label value", func(s *Spec) { s.TrustDomain = strings.Repeat("b", 64) }, "63"},
		{"plain http", func(s *Spec) { s.BundleEndpointURL = "http://signer.b.example/b.example" }, "must be an https URL"},
		{"an endpoint ID of another domain", func(s *Spec) { s.BundleEndpointProfile.EndpointSPIFFEID = EndpointID("a.example") }, `must be in trust domain "b.example"`},
		{"https_spiffe without a bundle", func(s *Spec) { s.TrustDomainBundle = "" }, "give its current bundle"},
		{"an endpoint ID with https_web", func(s *Spec) { s.BundleEndpointProfile.Type = ProfileWeb }, "only https_spiffe"},
		{"an unknown profile", func(s *Spec) { s.BundleEndpointProfile.Type = "https" }, `"https"`},
	} {
		s := good
		tc.change(&s)
		errs := s.Validate()
		switch {
		case tc.says == "" && len(errs) > 0:
			t.Errorf("%s: refused: %v", tc.name, errs)
		case tc.says != "" && !strings.Contains(errs.ToAggregate().Error(), tc.says):
			t.Errorf("%s: %v, want it to say %q", tc.name, errs, tc.says)
		}
	}
}

func TestParseBundle_PEMOrSPIFFEJSONNeverEmpty(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("b.example")
	ca := fixtures.CA("b")
	fromPEM, err := ParseBundle(td, []byte(fixtures.Bundle(ca)))
	if err != nil || len(fromPEM.X509Authorities()) != 1 {
		t.Fatalf("PEM: %v", err)
	}
	doc, _ := fromPEM.Marshal()
	fromJSON, err := ParseBundle(td, doc)
	if err != nil || !fromJSON.X509Authorities()[0].Equal(ca.Cert) {
		t.Fatalf("SPIFFE JSON: %v", err)
	}
	for _, tc := range []struct{ name, data, says string }{
		{"empty keys", `{"keys": []}`, "no X.509 authority"},
		{"garbage", "hello", "neither a SPIFFE bundle"},
		{"a leaf, not a CA", fixtures.Bundle(fixtures.MustNew(fixtures.Options{Leaf: true})), "entry 0"},
	} {
		if _, err := ParseBundle(td, []byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want it to say %q", tc.name, err, tc.says)
		}
	}
}
