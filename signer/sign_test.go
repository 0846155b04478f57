package signer

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/test/fixtures"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func testCA(t *testing.T, notBefore time.Time, validity time.Duration) *CA {
	t.Helper()
	ca, err := generateCA(context.Background(), "example.com/test", notBefore.Add(backdate), validity, caKeys{}, true)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestValidity(t *testing.T) {
	ca := testCA(t, t0.Add(-time.Hour), 30*24*time.Hour) // expires t0 + 30d - 1h
	tests := []struct {
		name          string
		now           time.Time
		lifetime      time.Duration
		wantNotBefore time.Time
		wantNotAfter  time.Time
		wantErr       string
	}{
		{name: "a short lifetime keeps all of it, backdated 5 minutes", now: t0, lifetime: 900 * time.Second, wantNotBefore: t0.Add(-5 * time.Minute), wantNotAfter: t0.Add(900 * time.Second)},
		{name: "just under 8 hours keeps all of it", now: t0, lifetime: 8*time.Hour - time.Second, wantNotBefore: t0.Add(-5 * time.Minute), wantNotAfter: t0.Add(8*time.Hour - time.Second)},
		{name: "8 hours or more loses the backdate from NotAfter", now: t0, lifetime: 8 * time.Hour, wantNotBefore: t0.Add(-5 * time.Minute), wantNotAfter: t0.Add(8*time.Hour - 5*time.Minute)},
		{name: "never past the CA's NotAfter", now: t0.Add(29 * 24 * time.Hour), lifetime: 7 * 24 * time.Hour, wantNotBefore: t0.Add(29*24*time.Hour - 5*time.Minute), wantNotAfter: ca.Cert.NotAfter},
		{name: "an expired CA signs nothing", now: ca.Cert.NotAfter, lifetime: time.Hour, wantErr: "the signing CA expired at"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nb, na, err := validity(tc.now, tc.lifetime, ca.Cert)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !nb.Equal(tc.wantNotBefore) || !na.Equal(tc.wantNotAfter) {
				t.Errorf("validity() = %s .. %s, %v; want %s .. %s", nb, na, err, tc.wantNotBefore, tc.wantNotAfter)
			}
		})
	}
}

// csrFor builds a CSR object around a PKCS#10 request.
func csrFor(t *testing.T, username string, dns []string, uris []string, usages ...certificatesv1.KeyUsage) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var parsed []*url.URL
	for _, u := range uris {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, p)
	}
	request, _ := fixtures.CSR("O=system:masters please", dns, parsed)
	if len(usages) == 0 {
		usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "req"},
		Spec:       certificatesv1.CertificateSigningRequestSpec{Request: request, Username: username, SignerName: "example.com/test", Usages: usages},
	}
}

func TestSign_TheSignerNotTheRequesterDecidesSubjectCAAndDates(t *testing.T) {
	ca := testCA(t, t0.Add(-time.Hour), 365*24*time.Hour)
	csr := csrFor(t, "system:serviceaccount:apps:web", []string{"web.apps.svc"}, []string{"spiffe://cluster.local/ns/apps/sa/web"})
	csr.Annotations = map[string]string{"experimental.cert-manager.io/request-is-ca": "true"}
	// Asking for a CA through cert-manager's annotation does not make one.
	certPEM, leaf, err := sign(csr, ca, time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(leaf.Subject.Names) != 0 || leaf.Subject.String() != "" {
		t.Errorf("subject = %q, want empty: the requester's subject is never copied", leaf.Subject)
	}
	if leaf.IsCA {
		t.Error("a leaf was issued with the CA bit")
	}
	for _, ext := range leaf.Extensions {
		if ext.Id.Equal(oidSubjectAltName) && !ext.Critical {
			t.Error("with an empty subject, the SAN extension must be critical")
		}
	}
	if leaf.URIs[0].String() != "spiffe://cluster.local/ns/apps/sa/web" || leaf.DNSNames[0] != "web.apps.svc" {
		t.Errorf("SANs = %v %v", leaf.URIs, leaf.DNSNames)
	}
	if !leaf.NotBefore.Equal(t0.Add(-backdate)) || !leaf.NotAfter.Equal(t0.Add(time.Hour)) {
		t.Errorf("dates = %s .. %s", leaf.NotBefore, leaf.NotAfter)
	}
	if leaf.KeyUsage&x509.KeyUsageDigitalSignature == 0 || len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("usages = %v %v, want those of the spec", leaf.KeyUsage, leaf.ExtKeyUsage)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the leaf does not verify against its CA: %v", err)
	}
	if n := strings.Count(string(certPEM), "BEGIN CERTIFICATE"); n != 1 {
		t.Errorf("a root CA's status.certificate holds %d certificates, want the leaf alone", n)
	}
}

func TestSign_AnIntermediateCASendsThePathToTheRoot(t *testing.T) {
	root := fixtures.CA("root")
	inter := fixtures.MustNew(fixtures.Options{CommonName: "intermediate", Parent: root})
	ca, err := decodeCA(context.Background(), append(inter.CertPEM(), root.CertPEM()...), inter.KeyPEM(), "", caKeys{})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := sign(csrFor(t, "u", []string{"a.example"}, nil), ca, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var cns []string
	for rest := certPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		c, _ := x509.ParseCertificate(b.Bytes)
		cns = append(cns, c.Subject.CommonName)
	}
	if strings.Join(cns, ",") != ",intermediate" {
		t.Errorf("status.certificate = %q, want the leaf then the intermediate (not the root)", cns)
	}
	if ca.Anchor().Subject.CommonName != "root" {
		t.Errorf("the anchor to publish is %q, want the root", ca.Anchor().Subject.CommonName)
	}
}

func TestSign_Refusals(t *testing.T) {
	ca := testCA(t, t0.Add(-time.Hour), 24*time.Hour)
	noSAN := csrFor(t, "u", nil, nil)
	garbage := csrFor(t, "u", []string{"a.example"}, nil)
	garbage.Spec.Request = []byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n")
	tampered := csrFor(t, "u", []string{"a.example"}, nil)
	block, _ := pem.Decode(tampered.Spec.Request)
	block.Bytes[len(block.Bytes)-1] ^= 0xff
	tampered.Spec.Request = pem.EncodeToMemory(block)
	tests := []struct {
		name       string
		csr        *certificatesv1.CertificateSigningRequest
		wantReason string
	}{
		{"a request naming no SAN", noSAN, "NoIdentity"},
		{"a request that does not parse", garbage, "InvalidRequest"},
		{"a request whose signature does not verify", tampered, "InvalidRequest"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := sign(tc.csr, ca, time.Hour, t0)
			r, ok := asRefusal(err)
			if !ok || r.reason != tc.wantReason {
				t.Errorf("err = %v, want a %s refusal", err, tc.wantReason)
			}
		})
	}
}
