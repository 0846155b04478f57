package signer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/policy"
	"github.com/trustsync/trustsync/tenancy"
)

const (
	// pcrMinLifetime and pcrRefreshMargin are upstream's rules for an issued
	// PodCertificateRequest: a certificate lives at least an hour, and the kubelet is
	// told to refresh it no sooner than 10 minutes after notBefore and no later than
	// 10 minutes before notAfter.
	pcrMinLifetime   = time.Hour
	pcrRefreshMargin = 10 * time.Minute
	// pcrBackdate absorbs relying parties' clock skew. It is smaller than the CSR
	// path's 5 minutes: the API server refuses a notBefore more than 5 minutes from
	// its own clock, and the signer's clock may differ from it too.
	pcrBackdate = time.Minute

	reasonIssued         = "Issued"
	reasonInvalidRequest = "InvalidRequest"
	reasonIdentity       = "IdentityRefused"
	reasonLifetime       = "LifetimeRefused"
	reasonCAExpiring     = "CAExpiresTooSoon"
)

// pcrOutcome is what the signer makes of a PodCertificateRequest: a status to write,
// with exactly one of the conditions Issued, Denied or Failed.
type pcrOutcome struct {
	status certificatesv1.PodCertificateRequestStatus
	// result and reason label the metrics: issued, denied or failed, and why.
	result, reason string
}

// stubRequestKey is the public key of a v1 request's stub PKCS#10 request, or why it
// has none.
func stubRequestKey(stub []byte) (crypto.PublicKey, string) {
	req, err := x509.ParseCertificateRequest(stub)
	if err != nil {
		return nil, fmt.Sprintf("spec.stubPKCS10Request does not parse as a PKCS#10 request: %v", err)
	}
	// The API server checks the proof of possession at admission; checked again so
	// that nothing that reached the signer another way is signed without it.
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Sprintf("spec.stubPKCS10Request's signature does not verify with its public key: %v", err)
	}
	return req.PublicKey, ""
}

// pkixKey is the public key of a v1beta1 request, given as a PKIX public key with a
// proof of possession: the key's signature over the pod's UID, as upstream checks it
// (Ed25519 over the bytes; ECDSA, ASN.1, and RSA-PSS over their SHA-256).
func pkixKey(pkixKey, proof []byte, podUID string) (crypto.PublicKey, string) {
	pub, err := x509.ParsePKIXPublicKey(pkixKey)
	if err != nil {
		return nil, fmt.Sprintf("spec.pkixPublicKey does not parse: %v", err)
	}
	digest := sha256.Sum256([]byte(podUID))
	ok := false
	switch k := pub.(type) {
	case ed25519.PublicKey:
		ok = ed25519.Verify(k, []byte(podUID), proof)
	case *ecdsa.PublicKey:
		ok = ecdsa.VerifyASN1(k, digest[:], proof)
	case *rsa.PublicKey:
		ok = rsa.VerifyPSS(k, crypto.SHA256, digest[:], proof, nil) == nil
	default:
		return nil, fmt.Sprintf("spec.pkixPublicKey is a %T, which is no key type Kubernetes allows", pub)
	}
	if !ok {
		return nil, "spec.proofOfPossession is not the key's signature over the pod's UID"
	}
	return pub, ""
}

// decidePCR is issuePCR once the request's public key is known (nil, with why, when
// it has none that proves possession), whatever version the request came in.
func decidePCR(pcr *certificatesv1.PodCertificateRequest, pub crypto.PublicKey, why string, rules *policy.Signer, ca *CA, now time.Time, refreshAt float64) (pcrOutcome, error) {
	deny := func(reason, format string, args ...any) pcrOutcome {
		return terminal(pcr, certificatesv1.PodCertificateRequestConditionTypeDenied, reason, fmt.Sprintf(format, args...), now)
	}
	fail := func(reason, format string, args ...any) pcrOutcome {
		return terminal(pcr, certificatesv1.PodCertificateRequestConditionTypeFailed, reason, fmt.Sprintf(format, args...), now)
	}

	if pub == nil {
		return deny(reasonInvalidRequest, "%s", why), nil
	}
	keyType, ok := podCertificateKeyType(pub)
	if !ok || !slices.Contains(rules.KeyTypes, keyType) {
		if !ok {
			keyType = fmt.Sprintf("%T", pub)
		}
		return deny(certificatesv1.PodCertificateRequestConditionUnsupportedKeyType,
			"key type %s is not one signer %s issues for; use one of keyType %s in the podCertificate volume", keyType, rules.SignerName, strings.Join(rules.KeyTypes, ", ")), nil
	}

	dnsNames, refusal := requestedDNSNames(pcr, rules)
	if refusal != "" {
		return deny(certificatesv1.PodCertificateRequestConditionInvalidUserConfig, "%s", refusal), nil
	}
	id, err := policy.WorkloadID(rules.Domain, pcr.Namespace, pcr.Spec.ServiceAccountName)
	if err != nil {
		return deny(reasonIdentity, "%v", err), nil
	}
	uri := id.URL()

	// The policy's default lifetime, within the request's maximum and the policy's.
	lifetime := time.Duration(rules.DefaultExpirationSeconds) * time.Second
	limit := time.Duration(rules.MaxExpirationSeconds) * time.Second
	if pcr.Spec.MaxExpirationSeconds != nil {
		limit = min(limit, time.Duration(*pcr.Spec.MaxExpirationSeconds)*time.Second)
	}
	lifetime = min(lifetime, limit)
	if lifetime < pcrMinLifetime {
		return deny(reasonLifetime, "the longest lifetime allowed, %s (the smaller of spec.maxExpirationSeconds and signer %s's maxExpirationSeconds), is below the 1-hour minimum Kubernetes sets for pod certificates; raise the policy's maxExpirationSeconds", limit, rules.SignerName), nil
	}
	notBefore := now.Add(-pcrBackdate).Truncate(time.Second)
	notAfter := notBefore.Add(lifetime)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter.Truncate(time.Second)
		if notAfter.Sub(notBefore) < pcrMinLifetime {
			return fail(reasonCAExpiring, "the signing CA expires at %s, too soon for a certificate of the 1-hour minimum; the signer rotates its CA before that, so the kubelet's retry will be issued", ca.Cert.NotAfter.UTC().Format(time.RFC3339)), nil
		}
	}

	serial, err := bundle.NewSerialNumber()
	if err != nil {
		return pcrOutcome{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, NotBefore: notBefore, NotAfter: notAfter,
		URIs: []*url.URL{uri}, DNSNames: dnsNames, PublicKey: pub,
		KeyUsage:              keyUsage(pub),
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	leafPEM, leaf, err := ca.issue(tmpl, pub)
	if err != nil {
		return pcrOutcome{}, fmt.Errorf("failed to sign PodCertificateRequest %s/%s: %w", pcr.Namespace, pcr.Name, err)
	}
	chain := ca.withChain(leafPEM)

	out := terminal(pcr, certificatesv1.PodCertificateRequestConditionTypeIssued, reasonIssued,
		fmt.Sprintf("Issued to %s, valid until %s", id, leaf.NotAfter.UTC().Format(time.RFC3339)), now)
	out.status.CertificateChain = string(chain)
	out.status.NotBefore = &metav1.Time{Time: leaf.NotBefore}
	out.status.NotAfter = &metav1.Time{Time: leaf.NotAfter}
	out.status.BeginRefreshAt = &metav1.Time{Time: refreshTime(leaf.NotBefore, leaf.NotAfter, refreshAt)}
	return out, nil
}

// refreshTime is notBefore plus fraction of the lifetime, kept within upstream's
// bounds: at least 10 minutes after notBefore and 10 minutes before notAfter.
func refreshTime(notBefore, notAfter time.Time, fraction float64) time.Time {
	at := notBefore.Add(time.Duration(float64(notAfter.Sub(notBefore)) * fraction)).Truncate(time.Second)
	earliest, latest := notBefore.Add(pcrRefreshMargin), notAfter.Add(-pcrRefreshMargin)
	switch {
	case at.Before(earliest):
		return earliest
	case at.After(latest):
		return latest
	}
	return at
}

func terminal(pcr *certificatesv1.PodCertificateRequest, conditionType, reason, message string, now time.Time) pcrOutcome {
	result := map[string]string{
		certificatesv1.PodCertificateRequestConditionTypeIssued: "issued",
		certificatesv1.PodCertificateRequestConditionTypeDenied: "denied",
		certificatesv1.PodCertificateRequestConditionTypeFailed: "failed",
	}[conditionType]
	return pcrOutcome{result: result, reason: reason, status: certificatesv1.PodCertificateRequestStatus{
		Conditions: []metav1.Condition{{
			Type: conditionType, Status: metav1.ConditionTrue, Reason: reason, Message: message,
			LastTransitionTime: metav1.NewTime(now), ObservedGeneration: pcr.Generation,
		}},
	}}
}

// requestedDNSNames reads the DNS names the pod's author asked for, refusing any
// annotation the signer does not know (as upstream asks signers to) and any name
// outside the policy's patterns for the request's namespace.
func requestedDNSNames(pcr *certificatesv1.PodCertificateRequest, rules *policy.Signer) ([]string, string) {
	var names []string
	for key, value := range pcr.Spec.UnverifiedUserAnnotations {
		if key != policy.PodCertificateDNSNamesAnnotation {
			return nil, fmt.Sprintf("user annotation %q is not one signer %s knows; the only one it reads is %s", key, rules.SignerName, policy.PodCertificateDNSNamesAnnotation)
		}
		for _, name := range strings.Split(value, ",") {
			if name = strings.TrimSpace(name); name != "" {
				names = append(names, name)
			}
		}
	}
	var patterns []string
	if rules.Approval != nil {
		patterns = rules.Approval.DNSNames
	}
	for _, name := range names {
		if errs := validation.IsDNS1123Subdomain(strings.ToLower(name)); len(errs) > 0 {
			return nil, fmt.Sprintf("DNS name %q is not a valid DNS name: %s", name, strings.Join(errs, "; "))
		}
		if !slices.ContainsFunc(patterns, func(p string) bool {
			return tenancy.MatchDNSName(strings.ReplaceAll(p, "{namespace}", pcr.Namespace), name)
		}) {
			if len(patterns) == 0 {
				return nil, fmt.Sprintf("DNS name %q was asked for, but signer %s's policy allows no DNS names (approval.dnsNames)", name, rules.SignerName)
			}
			return nil, fmt.Sprintf("DNS name %q matches none of the patterns signer %s allows in namespace %q: %s", name, rules.SignerName, pcr.Namespace, strings.ReplaceAll(strings.Join(patterns, ", "), "{namespace}", pcr.Namespace))
		}
	}
	return names, ""
}

// podCertificateKeyType names a public key as the podCertificate volume's keyType does.
func podCertificateKeyType(pub crypto.PublicKey) (string, bool) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return policy.KeyECDSAP256, true
		case elliptic.P384():
			return policy.KeyECDSAP384, true
		case elliptic.P521():
			return policy.KeyECDSAP521, true
		}
	case *rsa.PublicKey:
		switch k.N.BitLen() {
		case 3072:
			return policy.KeyRSA3072, true
		case 4096:
			return policy.KeyRSA4096, true
		}
	case ed25519.PublicKey:
		return policy.KeyED25519, true
	}
	return "", false
}

// keyUsage is what a leaf's key may do: sign, and for RSA also encipher keys (TLS
// key exchange without forward secrecy still exists).
func keyUsage(pub crypto.PublicKey) x509.KeyUsage {
	if _, ok := pub.(*rsa.PublicKey); ok {
		return x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	}
	return x509.KeyUsageDigitalSignature
}
