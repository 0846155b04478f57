package signer

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/cert-manager/cert-manager/pkg/util/pki"
	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/trustsync/trustsync/bundle"
)

const (
	// backdate absorbs clock skew between the signer and relying parties, as
	// Kubernetes' own signer does.
	backdate = 5 * time.Minute
	// shortLived: below this lifetime the backdate is not taken off NotAfter, so a
	// short certificate keeps all of its requested life (upstream's rule).
	shortLived = 8 * time.Hour
)

var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// refusal is a reason a CSR cannot be signed: it becomes a Failed condition.
type refusal struct {
	reason, message string
}

func (r *refusal) Error() string { return r.message }

// validity computes a certificate's dates as Kubernetes' signer does: NotBefore is
// backdated by 5 minutes; NotAfter is now + lifetime, less the backdate when the
// lifetime is 8 hours or more; never past the CA's own NotAfter. An expired CA signs
// nothing.
func validity(now time.Time, lifetime time.Duration, ca *x509.Certificate) (notBefore, notAfter time.Time, err error) {
	if !now.Before(ca.NotAfter) {
		return time.Time{}, time.Time{}, &refusal{reason: "CAExpired", message: fmt.Sprintf("the signing CA expired at %s; refusing to sign", ca.NotAfter.UTC().Format(time.RFC3339))}
	}
	notBefore = now.Add(-backdate)
	notAfter = now.Add(lifetime)
	if lifetime >= shortLived {
		notAfter = notAfter.Add(-backdate)
	}
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	return notBefore, notAfter, nil
}

// sign issues a certificate for csr from ca, valid for lifetime from now. It returns
// the PEM for status.certificate: the leaf, then the intermediates when the CA is one.
//
// cert-manager's pki builds the template (public key, SANs, key usages from the spec,
// checked against the request's own extensions); the signer then sets what it must
// never take from the requester: the subject (left empty, so no request can carry
// O=system:masters into a certificate a cluster component might trust; identities
// live in the SANs alone), the CA bit (never set), the dates, and the serial. The
// request's raw SAN extension is dropped and rebuilt from the parsed names, so no
// name type the approver never saw reaches the certificate.
func sign(csr *certificatesv1.CertificateSigningRequest, ca *CA, lifetime time.Duration, now time.Time) ([]byte, *x509.Certificate, error) {
	req, err := parseRequest(csr.Spec.Request)
	if err != nil {
		return nil, nil, err
	}
	if len(req.DNSNames)+len(req.URIs)+len(req.IPAddresses)+len(req.EmailAddresses) == 0 {
		return nil, nil, &refusal{reason: "NoIdentity", message: "the request names no DNS, URI, IP or email SAN; this signer puts identities in SANs only and does not copy the subject"}
	}
	tmpl, err := pki.CertificateTemplateFromCertificateSigningRequest(csr)
	if err != nil {
		return nil, nil, &refusal{reason: "InvalidRequest", message: err.Error()}
	}
	tmpl.Subject, tmpl.RawSubject = pkix.Name{}, nil
	var extra []pkix.Extension
	for _, ext := range tmpl.ExtraExtensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			extra = append(extra, ext)
		}
	}
	tmpl.ExtraExtensions = extra
	tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.MaxPathLen, tmpl.MaxPathLenZero = false, true, 0, false
	if tmpl.SerialNumber, err = bundle.NewSerialNumber(); err != nil {
		return nil, nil, err
	}
	if tmpl.NotBefore, tmpl.NotAfter, err = validity(now, lifetime, ca.Cert); err != nil {
		return nil, nil, err
	}
	leafPEM, leaf, err := ca.issue(tmpl, tmpl.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	return ca.withChain(leafPEM), leaf, nil
}

// parseRequest decodes spec.request and checks its signature: the requester must hold
// the key it asks a certificate for.
func parseRequest(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, &refusal{reason: "InvalidRequest", message: "spec.request is not a PEM CERTIFICATE REQUEST"}
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, &refusal{reason: "InvalidRequest", message: fmt.Sprintf("spec.request does not parse: %v", err)}
	}
	if err := req.CheckSignature(); err != nil {
		return nil, &refusal{reason: "InvalidRequest", message: fmt.Sprintf("spec.request's signature does not verify: %v", err)}
	}
	return req, nil
}

func asRefusal(err error) (*refusal, bool) {
	var r *refusal
	return r, errors.As(err, &r)
}
