package signer

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/trustsync/trustsync/policy"
	"github.com/trustsync/trustsync/test/fixtures"
)

var clusterLocal = spiffeid.RequireTrustDomainFromString("cluster.local")

func TestDecide(t *testing.T) {
	rules := policy.DefaultApproval()
	own := "spiffe://cluster.local/ns/apps/sa/web"
	sa := "system:serviceaccount:apps:web"
	tests := []struct {
		name        string
		csr         *certificatesv1.CertificateSigningRequest
		rules       *policy.Approval
		wantApprove bool
		wantMessage string
	}{
		{name: "a ServiceAccount's own identity is approved", csr: csrFor(t, sa, nil, []string{own}), wantApprove: true, wantMessage: "the request is for system:serviceaccount:apps:web's own identity spiffe://cluster.local/ns/apps/sa/web"},
		{name: "with DNS names its namespace's patterns allow", csr: csrFor(t, sa, []string{"web.apps.svc", "web.apps.svc.cluster.local"}, []string{own}), wantApprove: true},
		{name: "a user that is not a ServiceAccount is denied", csr: csrFor(t, "alice", nil, []string{own}), wantMessage: `requester "alice" is not a ServiceAccount`},
		{name: "another namespace's identity is denied", csr: csrFor(t, sa, nil, []string{"spiffe://cluster.local/ns/other/sa/web"}), wantMessage: `URI SAN "spiffe://cluster.local/ns/other/sa/web" is not the requester's own SPIFFE ID "spiffe://cluster.local/ns/apps/sa/web"`},
		{name: "another trust domain's identity is denied", csr: csrFor(t, sa, nil, []string{"spiffe://evil.example/ns/apps/sa/web"}), wantMessage: "is not the requester's own SPIFFE ID"},
		{name: "a URI SAN go-spiffe refuses is denied, however close to the identity", csr: csrFor(t, sa, nil, []string{"spiffe://Cluster.Local/ns/apps/sa/web"}), wantMessage: `URI SAN "spiffe://Cluster.Local/ns/apps/sa/web" is not the requester's own SPIFFE ID`},
		{name: "no URI SAN is denied", csr: csrFor(t, sa, []string{"web.apps.svc"}, nil), wantMessage: "the request has 0 URI SANs; it must have exactly one"},
		{name: "two URI SANs are denied", csr: csrFor(t, sa, nil, []string{own, own + "2"}), wantMessage: "the request has 2 URI SANs"},
		{name: "a DNS name of another namespace is denied", csr: csrFor(t, sa, []string{"web.other.svc"}, []string{own}), wantMessage: `DNS SAN "web.other.svc" matches none of the patterns allowed for namespace "apps": *.apps.svc, *.apps.svc.cluster.local`},
		{name: "a wildcard stands for one label only", csr: csrFor(t, sa, []string{"a.b.apps.svc"}, []string{own}), wantMessage: `DNS SAN "a.b.apps.svc"`},
		{name: "a usage outside the allow-list is denied", csr: csrFor(t, sa, nil, []string{own}, certificatesv1.UsageCodeSigning), wantMessage: `usage "code signing" is not allowed`},
		{name: "a CA request is denied", csr: withAnnotation(csrFor(t, sa, nil, []string{own}), "experimental.cert-manager.io/request-is-ca", "true"), wantMessage: "asks for a CA certificate"},
		{name: "a basicConstraints CA:TRUE extension is denied", csr: withExtension(t, csrFor(t, sa, nil, []string{own}), oidBasicConstraints, mustMarshal(t, basicConstraints{IsCA: true})), wantMessage: "asks for a CA certificate (basicConstraints CA:TRUE)"},
		{name: "a basicConstraints CA:FALSE extension is approved", csr: withExtension(t, csrFor(t, sa, nil, []string{own}), oidBasicConstraints, mustMarshal(t, basicConstraints{})), wantApprove: true},
		{name: "an unparsable basicConstraints extension is denied", csr: withExtension(t, csrFor(t, sa, nil, []string{own}), oidBasicConstraints, []byte{0x30, 0x03, 0x01, 0x01}), wantMessage: "basicConstraints extension does not parse"},
		{name: "a malformed ServiceAccount user is denied", csr: csrFor(t, "system:serviceaccount:apps", nil, []string{own}), wantMessage: "is not a ServiceAccount"},
		{
			name: "exact DNS patterns match exactly", csr: csrFor(t, sa, []string{"metrics.apps.example"}, []string{own}), wantApprove: true,
			rules: &policy.Approval{DNSNames: []string{"metrics.{namespace}.example"}, Usages: []string{"digital signature", "server auth"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rules
			if tc.rules != nil {
				r = tc.rules
			}
			req, err := parseRequest(tc.csr.Spec.Request)
			if err != nil {
				t.Fatal(err)
			}
			d := decide(tc.csr, req, clusterLocal, r)
			if d.approve != tc.wantApprove || !strings.Contains(d.message, tc.wantMessage) {
				t.Errorf("decide() = %v %q, want %v %q", d.approve, d.message, tc.wantApprove, tc.wantMessage)
			}
		})
	}
}

func TestDecide_IPAddressesFollowThePolicy(t *testing.T) {
	sa, own := "system:serviceaccount:apps:web", "spiffe://cluster.local/ns/apps/sa/web"
	csr := csrWithIP(t, sa, own)
	req, _ := parseRequest(csr.Spec.Request)
	rules := policy.DefaultApproval()
	if d := decide(csr, req, clusterLocal, rules); d.approve || !strings.Contains(d.message, "IP SANs") {
		t.Errorf("an IP SAN without permission: %v %q", d.approve, d.message)
	}
	rules.IPAddresses = true
	if d := decide(csr, req, clusterLocal, rules); !d.approve {
		t.Errorf("an IP SAN with permission was denied: %q", d.message)
	}
}

func withAnnotation(csr *certificatesv1.CertificateSigningRequest, k, v string) *certificatesv1.CertificateSigningRequest {
	csr.Annotations = map[string]string{k: v}
	return csr
}

func csrWithIP(t *testing.T, username, uri string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	csr := csrFor(t, username, nil, []string{uri})
	u, _ := url.Parse(uri)
	csr.Spec.Request, _ = fixtures.Request(&x509.CertificateRequest{IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)}, URIs: []*url.URL{u}})
	return csr
}

type basicConstraints struct {
	IsCA bool `asn1:"optional"`
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := asn1.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withExtension re-creates the CSR's PKCS#10 request, same SANs, with one more
// requested extension.
func withExtension(t *testing.T, csr *certificatesv1.CertificateSigningRequest, id asn1.ObjectIdentifier, value []byte) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	old, err := parseRequest(csr.Spec.Request)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		DNSNames: old.DNSNames, URIs: old.URIs, ExtraExtensions: []pkix.Extension{{Id: id, Value: value}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	return csr
}
