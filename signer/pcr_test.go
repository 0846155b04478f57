//lint:file-ignore SA1019 v1beta1 PodCertificateRequests of Kubernetes 1.35 carry the key in the deprecated fields, which these tests send.

package signer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/policy"
)

var pcrNow = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

var testKeys = sync.OnceValue(func() map[string]crypto.Signer {
	keys := map[string]crypto.Signer{}
	for name, gen := range map[string]func() (crypto.Signer, error){
		policy.KeyECDSAP256: func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) },
		policy.KeyECDSAP384: func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P384(), rand.Reader) },
		policy.KeyECDSAP521: func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P521(), rand.Reader) },
		policy.KeyED25519: func() (crypto.Signer, error) {
			_, k, err := ed25519.GenerateKey(rand.Reader)
			return k, err
		},
		policy.KeyRSA3072: func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, 3072) },
		"RSA2048":         func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, 2048) },
	} {
		k, err := gen()
		if err != nil {
			panic(err)
		}
		keys[name] = k
	}
	return keys
})

// stubRequest is what the kubelet sends: a PKCS#10 request for key, empty but for
// whatever the test adds (a subject and SANs the signer must ignore).
func stubRequest(t testing.TB, key crypto.Signer, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	if tmpl == nil {
		tmpl = &x509.CertificateRequest{}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func podCertificateRequest(stub []byte, maxSeconds *int32, annotations map[string]string) *certificatesv1.PodCertificateRequest {
	return &certificatesv1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web-abc-1", Generation: 1},
		Spec: certificatesv1.PodCertificateRequestSpec{
			SignerName: "trustsync.io/workload", PodName: "web-abc", PodUID: "pod-uid", ServiceAccountName: "web", ServiceAccountUID: "sa-uid",
			NodeName: "node-1", NodeUID: "node-uid", MaxExpirationSeconds: maxSeconds, StubPKCS10Request: stub, UnverifiedUserAnnotations: annotations,
		},
	}
}

func pcrRules(t testing.TB, extra string) *policy.Signer {
	t.Helper()
	p, err := policy.Parse([]byte("apiVersion: trustsync.io/v1alpha1\nkind: Policy\nsigners:\n- signerName: trustsync.io/workload\n  trustDomain: example.org\n  approval: {}\n" + extra))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := p.Signer("trustsync.io/workload")
	return s
}

// assertUpstreamStatusRules checks what the API server's status validation checks on
// an issued, denied or failed PodCertificateRequest, so a status it would refuse fails
// here first.
func assertUpstreamStatusRules(t *testing.T, pcr *certificatesv1.PodCertificateRequest, out pcrOutcome, now time.Time) {
	t.Helper()
	st := out.status
	if len(st.Conditions) != 1 || st.Conditions[0].Status != metav1.ConditionTrue {
		t.Fatalf("conditions %+v; want exactly one, with status True", st.Conditions)
	}
	if errs := metav1validation.ValidateConditions(st.Conditions, field.NewPath("status", "conditions")); len(errs) > 0 {
		t.Fatalf("conditions the API server refuses: %v", errs)
	}
	if st.Conditions[0].Type != certificatesv1.PodCertificateRequestConditionTypeIssued {
		if st.CertificateChain != "" || st.NotBefore != nil || st.NotAfter != nil || st.BeginRefreshAt != nil {
			t.Fatalf("a %s status sets more than its condition: %+v", st.Conditions[0].Type, st)
		}
		return
	}
	block, _ := pem.Decode([]byte(st.CertificateChain))
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("certificateChain does not start with a CERTIFICATE block: %q", st.CertificateChain)
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range leaf.DNSNames {
		if name == "" || strings.Contains(name, "..") || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") {
			t.Errorf("DNS name %q: the API server refuses an empty name, \"..\", or a leading or trailing dot", name)
		}
	}
	stub, _ := x509.ParseCertificateRequest(pcr.Spec.StubPKCS10Request)
	if !stub.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(leaf.PublicKey) {
		t.Error("the leaf is not issued to the stub request's public key")
	}
	if !st.NotBefore.Time.Equal(leaf.NotBefore) || !st.NotAfter.Time.Equal(leaf.NotAfter) {
		t.Errorf("status notBefore/notAfter %s/%s differ from the leaf's %s/%s", st.NotBefore, st.NotAfter, leaf.NotBefore, leaf.NotAfter)
	}
	if d := st.NotBefore.Time.Sub(now); d > 5*time.Minute || d < -5*time.Minute {
		t.Errorf("notBefore %s is more than 5 minutes from now %s", st.NotBefore, now)
	}
	lifetime := leaf.NotAfter.Sub(leaf.NotBefore)
	if lifetime < time.Hour || (pcr.Spec.MaxExpirationSeconds != nil && lifetime > time.Duration(*pcr.Spec.MaxExpirationSeconds)*time.Second) {
		t.Errorf("lifetime %s is outside [1h, spec.maxExpirationSeconds]", lifetime)
	}
	if st.BeginRefreshAt.Time.Before(leaf.NotBefore.Add(10*time.Minute)) || st.BeginRefreshAt.Time.After(leaf.NotAfter.Add(-10*time.Minute)) {
		t.Errorf("beginRefreshAt %s is outside [notBefore+10m, notAfter-10m]", st.BeginRefreshAt)
	}
}

func TestIssuePCR(t *testing.T) {
	ca := testCA(t, pcrNow.Add(-time.Hour), 365*24*time.Hour)
	keys := testKeys()
	ecdsaStub := stubRequest(t, keys[policy.KeyECDSAP256], nil)
	for _, tc := range []struct {
		name        string
		pcr         *certificatesv1.PodCertificateRequest
		policy      string
		ca          *CA
		wantType    string
		wantReason  string
		wantMessage string
		check       func(t *testing.T, leaf *x509.Certificate)
	}{
		{
			name: "the certificate carries the pod's ServiceAccount's SPIFFE ID and nothing the stub asks for",
			pcr: podCertificateRequest(stubRequest(t, keys[policy.KeyECDSAP256], &x509.CertificateRequest{
				Subject: pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}, URIs: []*url.URL{{Scheme: "spiffe", Host: "example.org", Path: "/ns/kube-system/sa/admin"}}, DNSNames: []string{"kubernetes.default.svc"},
			}), nil, nil),
			wantType: "Issued", wantReason: "Issued",
			check: func(t *testing.T, leaf *x509.Certificate) {
				if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://example.org/ns/apps/sa/web" {
					t.Errorf("URI SANs %v, want only spiffe://example.org/ns/apps/sa/web", leaf.URIs)
				}
				if len(leaf.DNSNames) != 0 || leaf.Subject.CommonName != "" || len(leaf.Subject.Organization) != 0 || leaf.IsCA {
					t.Errorf("DNS %v, subject %q, CA %v: the stub's names or subject reached the certificate", leaf.DNSNames, leaf.Subject, leaf.IsCA)
				}
			},
		},
		{
			name: "the lifetime is the policy's default when the request allows it", pcr: podCertificateRequest(ecdsaStub, ptr.To[int32](86400), nil),
			policy: "  defaultExpirationSeconds: 7200\n", wantType: "Issued", wantReason: "Issued",
			check: func(t *testing.T, leaf *x509.Certificate) { assertLifetime(t, leaf, 2*time.Hour) },
		},
		{
			name: "the lifetime never exceeds spec.maxExpirationSeconds", pcr: podCertificateRequest(ecdsaStub, ptr.To[int32](3600), nil),
			wantType: "Issued", wantReason: "Issued",
			check: func(t *testing.T, leaf *x509.Certificate) { assertLifetime(t, leaf, time.Hour) },
		},
		{
			name: "the lifetime never exceeds the policy's maximum", pcr: podCertificateRequest(ecdsaStub, ptr.To[int32](86400*30), nil),
			policy: "  maxExpirationSeconds: 10800\n  defaultExpirationSeconds: 10800\n", wantType: "Issued", wantReason: "Issued",
			check: func(t *testing.T, leaf *x509.Certificate) { assertLifetime(t, leaf, 3*time.Hour) },
		},
		{
			name: "a policy whose maximum is under upstream's one-hour minimum denies, saying what to raise", pcr: podCertificateRequest(ecdsaStub, nil, nil),
			policy: "  maxExpirationSeconds: 1800\n  defaultExpirationSeconds: 1800\n", wantType: "Denied", wantReason: "LifetimeRefused", wantMessage: "raise the policy's maxExpirationSeconds",
		},
		{
			name: "DNS names within the policy's patterns are certified", pcr: podCertificateRequest(ecdsaStub, nil, map[string]string{policy.PodCertificateDNSNamesAnnotation: "web.apps.svc, web.apps.svc.cluster.local"}),
			wantType: "Issued", wantReason: "Issued",
			check: func(t *testing.T, leaf *x509.Certificate) {
				if strings.Join(leaf.DNSNames, ",") != "web.apps.svc,web.apps.svc.cluster.local" {
					t.Errorf("DNS names %v", leaf.DNSNames)
				}
			},
		},
		{
			name: "a DNS name outside the policy's patterns is denied with upstream's reason, naming the patterns", pcr: podCertificateRequest(ecdsaStub, nil, map[string]string{policy.PodCertificateDNSNamesAnnotation: "web.other.svc"}),
			wantType: "Denied", wantReason: "InvalidUnverifiedUserAnnotations", wantMessage: `DNS name "web.other.svc" matches none of the patterns signer trustsync.io/workload allows in namespace "apps": *.apps.svc`,
		},
		{
			name: "an annotation the signer does not know is denied, naming the one it reads", pcr: podCertificateRequest(ecdsaStub, nil, map[string]string{"example.com/ttl": "1h"}),
			wantType: "Denied", wantReason: "InvalidUnverifiedUserAnnotations", wantMessage: `user annotation "example.com/ttl" is not one signer trustsync.io/workload knows; the only one it reads is trustsync.io/dns-names`,
		},
		{
			name: "a key type Kubernetes does not allow is denied as UnsupportedKeyType with the ones to use", pcr: podCertificateRequest(stubRequest(t, keys["RSA2048"], nil), nil, nil),
			wantType: "Denied", wantReason: "UnsupportedKeyType", wantMessage: "key type *rsa.PublicKey is not one signer trustsync.io/workload issues for; use one of keyType ECDSAP256, ECDSAP384, ECDSAP521, ED25519, RSA3072, RSA4096",
		},
		{
			name: "a key type the policy does not list is denied as UnsupportedKeyType", pcr: podCertificateRequest(stubRequest(t, keys[policy.KeyED25519], nil), nil, nil),
			policy: "  keyTypes: [ECDSAP256]\n", wantType: "Denied", wantReason: "UnsupportedKeyType", wantMessage: "key type ED25519 is not one signer trustsync.io/workload issues for; use one of keyType ECDSAP256 in the podCertificate volume",
		},
		{name: "ECDSA P-384 is issued", pcr: podCertificateRequest(stubRequest(t, keys[policy.KeyECDSAP384], nil), nil, nil), wantType: "Issued", wantReason: "Issued"},
		{name: "ECDSA P-521 is issued", pcr: podCertificateRequest(stubRequest(t, keys[policy.KeyECDSAP521], nil), nil, nil), wantType: "Issued", wantReason: "Issued"},
		{name: "Ed25519 is issued", pcr: podCertificateRequest(stubRequest(t, keys[policy.KeyED25519], nil), nil, nil), wantType: "Issued", wantReason: "Issued"},
		{name: "RSA 3072 is issued", pcr: podCertificateRequest(stubRequest(t, keys[policy.KeyRSA3072], nil), nil, nil), wantType: "Issued", wantReason: "Issued"},
		{
			name: "a stub request that does not parse is denied", pcr: podCertificateRequest([]byte("not DER"), nil, nil),
			wantType: "Denied", wantReason: "InvalidRequest", wantMessage: "does not parse as a PKCS#10 request",
		},
		{
			name: "a stub request whose signature does not verify is denied: no proof of possession", pcr: podCertificateRequest(tamper(ecdsaStub), nil, nil),
			wantType: "Denied", wantReason: "InvalidRequest", wantMessage: "signature does not verify",
		},
		{
			name: "a CA expiring within the hour fails the request until the rotated CA signs it", pcr: podCertificateRequest(ecdsaStub, nil, nil),
			ca: testCA(t, pcrNow.Add(-24*time.Hour), 24*time.Hour+30*time.Minute), wantType: "Failed", wantReason: "CAExpiresTooSoon",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			signingCA := ca
			if tc.ca != nil {
				signingCA = tc.ca
			}
			out, err := issuePCR(tc.pcr, pcrRules(t, tc.policy), signingCA, pcrNow, 0.7)
			if err != nil {
				t.Fatal(err)
			}
			assertUpstreamStatusRules(t, tc.pcr, out, pcrNow)
			c := out.status.Conditions[0]
			if c.Type != tc.wantType || c.Reason != tc.wantReason || !strings.Contains(c.Message, tc.wantMessage) {
				t.Fatalf("condition %s/%s %q; want %s/%s containing %q", c.Type, c.Reason, c.Message, tc.wantType, tc.wantReason, tc.wantMessage)
			}
			if tc.check != nil {
				block, _ := pem.Decode([]byte(out.status.CertificateChain))
				leaf, err := x509.ParseCertificate(block.Bytes)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool(signingCA.Cert), CurrentTime: pcrNow, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
					t.Errorf("the leaf does not verify against the CA: %v", err)
				}
				tc.check(t, leaf)
			}
		})
	}
}

func assertLifetime(t *testing.T, leaf *x509.Certificate, want time.Duration) {
	t.Helper()
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got != want {
		t.Errorf("lifetime %s, want %s", got, want)
	}
}

func pool(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

// tamper flips a bit of the request's signature.
func tamper(der []byte) []byte {
	out := append([]byte{}, der...)
	out[len(out)-2] ^= 0x01
	return out
}

func TestRefreshTime_SpreadsWithinUpstreamBounds(t *testing.T) {
	nb := pcrNow
	for _, tc := range []struct {
		name     string
		lifetime time.Duration
		fraction float64
		want     time.Duration // after notBefore
	}{
		{"a fraction of a day's lifetime", 24 * time.Hour, 0.7, time.Duration(0.7 * float64(24*time.Hour))},
		{"never sooner than 10 minutes after notBefore", time.Hour, 0.01, 10 * time.Minute},
		{"never later than 10 minutes before notAfter", time.Hour, 0.99, 50 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := refreshTime(nb, nb.Add(tc.lifetime), tc.fraction).Sub(nb); got != tc.want.Truncate(time.Second) {
				t.Errorf("refresh %s after notBefore, want %s", got, tc.want)
			}
		})
	}
}

// FuzzIssuePCR feeds arbitrary stub requests and user annotations: the signer never
// panics, always ends the request with exactly one condition the API server accepts,
// and issues only to the stub's own key.
func FuzzIssuePCR(f *testing.F) {
	keys := testKeys()
	for _, name := range []string{policy.KeyECDSAP256, policy.KeyED25519, "RSA2048"} {
		f.Add(stubRequest(f, keys[name], nil), "")
	}
	f.Add([]byte{0x30, 0x03, 0x02, 0x01, 0x00}, "web.apps.svc")
	f.Add(stubRequest(f, keys[policy.KeyECDSAP256], nil), "web.apps.svc,*.apps.svc,..")
	var once sync.Once
	var ca *CA
	f.Fuzz(func(t *testing.T, stub []byte, dnsNames string) {
		once.Do(func() { ca = testCA(t, pcrNow.Add(-time.Hour), 365*24*time.Hour) })
		pcr := podCertificateRequest(stub, nil, map[string]string{policy.PodCertificateDNSNamesAnnotation: dnsNames})
		out, err := issuePCR(pcr, pcrRules(t, ""), ca, pcrNow, 0.7)
		if err != nil {
			t.Fatal(err)
		}
		assertUpstreamStatusRules(t, pcr, out, pcrNow)
	})
}

// proofOfPossession signs the pod's UID as the kubelet does for a v1beta1 request.
func proofOfPossession(t *testing.T, key crypto.Signer, podUID string) []byte {
	t.Helper()
	digest := sha256.Sum256([]byte(podUID))
	var sig []byte
	var err error
	switch k := key.(type) {
	case ed25519.PrivateKey:
		sig = ed25519.Sign(k, []byte(podUID))
	case *ecdsa.PrivateKey:
		sig, err = ecdsa.SignASN1(rand.Reader, k, digest[:])
	case *rsa.PrivateKey:
		sig, err = rsa.SignPSS(rand.Reader, k, crypto.SHA256, digest[:], nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

func TestPKIXKey_AcceptsOnlyAProofOverThePodUID(t *testing.T) {
	keys := testKeys()
	for _, name := range []string{policy.KeyECDSAP256, policy.KeyED25519, policy.KeyRSA3072} {
		key := keys[name]
		der, err := x509.MarshalPKIXPublicKey(key.Public())
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name+": a signature over the pod's UID proves possession", func(t *testing.T) {
			pub, why := pkixKey(der, proofOfPossession(t, key, "pod-uid"), "pod-uid")
			if pub == nil || !key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(pub) {
				t.Fatalf("refused: %s", why)
			}
		})
		t.Run(name+": a signature over another pod's UID does not", func(t *testing.T) {
			if pub, why := pkixKey(der, proofOfPossession(t, key, "other-pod"), "pod-uid"); pub != nil || !strings.Contains(why, "not the key's signature over the pod's UID") {
				t.Fatalf("accepted, or refused saying %q", why)
			}
		})
	}
	t.Run("a key that does not parse is refused, saying so", func(t *testing.T) {
		if pub, why := pkixKey([]byte("junk"), nil, "pod-uid"); pub != nil || !strings.Contains(why, "spec.pkixPublicKey does not parse") {
			t.Fatalf("accepted, or refused saying %q", why)
		}
	})
}

func TestDecidePCR_AV1beta1RequestIsIssuedToItsProvenKey(t *testing.T) {
	ca := testCA(t, pcrNow.Add(-time.Hour), 365*24*time.Hour)
	key := testKeys()[policy.KeyECDSAP256]
	der, _ := x509.MarshalPKIXPublicKey(key.Public())
	beta := &certificatesv1beta1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web-beta"},
		Spec: certificatesv1beta1.PodCertificateRequestSpec{
			SignerName: "trustsync.io/workload", PodName: "web", PodUID: "pod-uid", ServiceAccountName: "web", NodeName: "node-1",
			MaxExpirationSeconds: ptr.To[int32](3600), PKIXPublicKey: der, ProofOfPossession: proofOfPossession(t, key, "pod-uid"),
		},
	}
	pub, why := pkixKey(beta.Spec.PKIXPublicKey, beta.Spec.ProofOfPossession, string(beta.Spec.PodUID))
	out, err := decidePCR(v1FromBeta(beta), pub, why, pcrRules(t, ""), ca, pcrNow, 0.7)
	if err != nil {
		t.Fatal(err)
	}
	if c := out.status.Conditions[0]; c.Type != "Issued" {
		t.Fatalf("condition %s/%s: %s", c.Type, c.Reason, c.Message)
	}
	block, _ := pem.Decode([]byte(out.status.CertificateChain))
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(leaf.PublicKey) || leaf.URIs[0].String() != "spiffe://example.org/ns/apps/sa/web" || leaf.NotAfter.Sub(leaf.NotBefore) != time.Hour {
		t.Errorf("leaf for %v, URI %v, lifetime %s; want the proven key, the ServiceAccount's SPIFFE ID, 1h", leaf.PublicKey, leaf.URIs, leaf.NotAfter.Sub(leaf.NotBefore))
	}
}

// issuePCR is how the controller decides a PodCertificateRequest and, when it may be issued, signs it. The
// identity comes only from the request's spec, which the API server fills from the
// pod it names: the SPIFFE ID of the pod's ServiceAccount, nothing the pod's author
// chose. refreshAt is the fraction of the lifetime after which the kubelet should
// refresh, drawn per request so that a node's pods do not all renew at once.
func issuePCR(pcr *certificatesv1.PodCertificateRequest, rules *policy.Signer, ca *CA, now time.Time, refreshAt float64) (pcrOutcome, error) {
	pub, why := stubRequestKey(pcr.Spec.StubPKCS10Request)
	return decidePCR(pcr, pub, why, rules, ca, now, refreshAt)
}
