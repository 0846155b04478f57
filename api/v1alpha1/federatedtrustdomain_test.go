package v1alpha1

import (
	"crypto/fips140"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustsync/trustsync/test/fixtures"
)

func TestParseFederatedTrustDomainSpec_SaysWhatIsWrongWithTheOffendingValue(t *testing.T) {
	ca := fixtures.CA("b")
	pem := fixtures.Bundle(ca)
	good := FederatedTrustDomainSpec{TrustDomain: "b.example", BundleEndpointURL: "https://signer.b.example:8443/b.example",
		BundleEndpointProfile: BundleEndpointProfile{Type: ProfileSPIFFE, EndpointSPIFFEID: BundleEndpointID("b.example")}, TrustDomainBundle: pem}
	for _, tc := range []struct {
		name   string
		change func(*FederatedTrustDomainSpec)
		says   string
	}{
		{"a trustsync peer", func(*FederatedTrustDomainSpec) {}, ""},
		{"https_web needs no bundle", func(s *FederatedTrustDomainSpec) {
			s.BundleEndpointProfile = BundleEndpointProfile{Type: ProfileWeb}
			s.TrustDomainBundle = ""
		}, ""},
		{"a scheme in the trust domain", func(s *FederatedTrustDomainSpec) { s.TrustDomain = "spiffe://b.example" }, "without scheme"},
		{"an uppercase trust domain", func(s *FederatedTrustDomainSpec) { s.TrustDomain = "B.example" }, "B.example"},
		{"'--' in the trust domain", func(s *FederatedTrustDomainSpec) {
			s.TrustDomain = "xn--b.example"
			s.BundleEndpointProfile.EndpointSPIFFEID = BundleEndpointID("xn--b.example")
		}, "may not contain"},
		{"a trust domain longer than a label value", func(s *FederatedTrustDomainSpec) { s.TrustDomain = strings.Repeat("b", 64) }, "63"},
		{"plain http", func(s *FederatedTrustDomainSpec) { s.BundleEndpointURL = "http://signer.b.example/b.example" }, "must be an https URL"},
		{"an endpoint ID of another domain", func(s *FederatedTrustDomainSpec) {
			s.BundleEndpointProfile.EndpointSPIFFEID = BundleEndpointID("a.example")
		}, `must be in trust domain "b.example"`},
		{"https_spiffe without a bundle", func(s *FederatedTrustDomainSpec) { s.TrustDomainBundle = "" }, "give its current bundle"},
		{"an endpoint ID with https_web", func(s *FederatedTrustDomainSpec) { s.BundleEndpointProfile.Type = ProfileWeb }, "only https_spiffe"},
		{"an unknown profile", func(s *FederatedTrustDomainSpec) { s.BundleEndpointProfile.Type = "https" }, `"https"`},
		{"a bundle to start from that cannot be imported", func(s *FederatedTrustDomainSpec) { s.TrustDomainBundle = `{"keys": []}` }, "spec.trustDomainBundle: Invalid value: \"\": the bundle to start from cannot be imported: the bundle holds no X.509 authority"},
	} {
		s := good
		tc.change(&s)
		parsed, err := ParseFederatedTrustDomainSpec(&s)
		switch {
		case tc.says == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
			t.Errorf("%s: %v, want it to say %q", tc.name, err, tc.says)
		case err == nil && (parsed.TrustDomain.String() != s.TrustDomain || parsed.EndpointURL.String() != s.BundleEndpointURL || parsed.BundleName != "trustsync.io:federated:b.example"):
			t.Errorf("%s: parsed %+v, which does not say what the spec says", tc.name, parsed)
		case err == nil && s.TrustDomainBundle != "" && (parsed.Bootstrap == nil || !parsed.Bootstrap.X509Authorities()[0].Equal(ca.Cert)):
			t.Errorf("%s: the bundle to start from was not read", tc.name)
		case err == nil && parsed.Profile == ProfileSPIFFE && parsed.EndpointID.String() != BundleEndpointID("b.example"):
			t.Errorf("%s: endpoint ID %q", tc.name, parsed.EndpointID)
		}
	}
}

func TestParseSPIFFEBundle_PEMOrSPIFFEJSONNeverEmpty(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("b.example")
	ca := fixtures.CA("b")
	fromPEM, err := ParseSPIFFEBundle(td, []byte(fixtures.Bundle(ca)))
	if err != nil || len(fromPEM.X509Authorities()) != 1 {
		t.Fatalf("PEM: %v", err)
	}
	doc, _ := fixtures.SPIFFEBundleJSON(fromPEM)
	fromJSON, err := ParseSPIFFEBundle(td, doc)
	if err != nil || !fromJSON.X509Authorities()[0].Equal(ca.Cert) {
		t.Fatalf("SPIFFE JSON: %v", err)
	}
	for _, tc := range []struct{ name, data, says string }{
		{"empty keys", `{"keys": []}`, "no X.509 authority"},
		{"garbage", "hello", "neither a SPIFFE bundle"},
		{"a leaf, not a CA", fixtures.Bundle(fixtures.MustNew(fixtures.Options{Leaf: true})), "entry 0"},
	} {
		if _, err := ParseSPIFFEBundle(td, []byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want it to say %q", tc.name, err, tc.says)
		}
	}
}

// An import holds what its status can name and what can be trusted: more authorities
// than the status lists, or one with a breakable RSA key, is refused, saying which.
func TestCheckFederatedBundle_RefusesWhatTheStatusCannotNameAndBreakableKeys(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("b.example")
	many := make([]*x509.Certificate, 0, MaxFederatedAnchors+1)
	for range MaxFederatedAnchors + 1 {
		many = append(many, fixtures.CA("one of many").Cert)
	}
	// The peer's weak authority is made where FIPS 140-3 mode would refuse to make
	// it: what is tested is that the import refuses it.
	var der []byte
	var err error
	fips140.WithoutEnforcement(func() {
		var key *rsa.PrivateKey
		if key, err = rsa.GenerateKey(rand.Reader, 1024); err != nil {
			return
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "weak"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
		der, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	})
	if err != nil {
		t.Fatal(err)
	}
	weak, _ := x509.ParseCertificate(der)
	for _, tc := range []struct {
		name        string
		authorities []*x509.Certificate
		says        string
	}{
		{"exactly the most the status names is imported", many[:MaxFederatedAnchors], ""},
		{"one more than the status names is refused", many, "holds 1025 X.509 authorities; at most 1024"},
		{"a 1024-bit RSA authority is refused", []*x509.Certificate{fixtures.CA("fine").Cert, weak}, "has a 1024-bit RSA key; at least 2048"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckFederatedBundle(spiffebundle.FromX509Authorities(td, tc.authorities))
			switch {
			case tc.says == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
				t.Fatalf("%v, want it to say %q", err, tc.says)
			}
		})
	}
}

// An expired authority is imported as the peer sent it, and named.
func TestExpiredAuthorities_NamesTheAuthoritiesPastTheirNotAfter(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("b.example")
	now := time.Now()
	current := fixtures.CA("current").Cert
	old := fixtures.MustNew(fixtures.Options{CommonName: "old", NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)}).Cert
	b := spiffebundle.FromX509Authorities(td, []*x509.Certificate{current, old})
	if err := CheckFederatedBundle(b); err != nil {
		t.Fatalf("a bundle with an expired authority is refused: %v", err)
	}
	if got := ExpiredAuthorities(b, now); len(got) != 1 || !got[0].Equal(old) {
		t.Errorf("expired %v, want the old CA alone", got)
	}
}
