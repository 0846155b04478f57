package signer

import (
	"context"
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"time"

	"github.com/cert-manager/cert-manager/pkg/util/pki"

	"github.com/trustsync/trustsync/bundle"
)

// CA is a signing certificate with its key and the chain above it (empty for a root).
type CA struct {
	Cert  *x509.Certificate
	Key   crypto.Signer
	Chain []*x509.Certificate
	// KeyRef is where Key lives in the signer's keeper; empty when the CA Secret
	// holds it.
	KeyRef string
}

// keyPlace says where the CA's key lives, as the rotation status publishes it:
// "secret", or its place in the keeper.
func (ca *CA) keyPlace() string {
	if ca.KeyRef == "" {
		return "secret"
	}
	return ca.KeyRef
}

// Anchor is the certificate relying parties trust for this CA: the root of its chain.
func (ca *CA) Anchor() *x509.Certificate {
	if len(ca.Chain) > 0 {
		return ca.Chain[len(ca.Chain)-1]
	}
	return ca.Cert
}

// withChain appends to a leaf's PEM what relying parties need to reach the anchor
// they trust: nothing for a root CA; for an intermediate, itself and the
// intermediates above it, the root left out.
func (ca *CA) withChain(leafPEM []byte) []byte {
	if len(ca.Chain) == 0 {
		return leafPEM
	}
	return append(leafPEM, encodeCerts(append([]*x509.Certificate{ca.Cert}, ca.Chain[:len(ca.Chain)-1]...)...)...)
}

// issue signs tmpl for pub with the CA: the one place a leaf is signed, for CSRs,
// PodCertificateRequests and the bundle endpoint's own certificate. A keeper's
// failure comes back as itself (a *keeper.UnavailableError), so the request waits
// for the keeper rather than failing: cert-manager's pki.SignCertificate, which
// builds the certificate, returns errors flattened to text.
func (ca *CA) issue(tmpl *x509.Certificate, pub crypto.PublicKey) ([]byte, *x509.Certificate, error) {
	key := &signErrors{Signer: ca.Key}
	certPEM, cert, err := pki.SignCertificate(tmpl, ca.Cert, pub, key)
	if err != nil && key.err != nil {
		return nil, nil, key.err
	}
	return certPEM, cert, err
}

// signErrors keeps the error of the last failed signature.
type signErrors struct {
	crypto.Signer
	err error
}

func (s *signErrors) Sign(r io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	sig, err := s.Signer.Sign(r, digest, opts)
	if err != nil {
		s.err = err
	}
	return sig, err
}

// generateCA makes a self-signed ECDSA P-256 CA for signerName, valid from now for
// validity, its key made where keys says (first: the signer's first CA).
func generateCA(ctx context.Context, signerName string, now time.Time, validity time.Duration, keys caKeys, first bool) (*CA, error) {
	key, where, err := keys.generate(ctx, now, first)
	if err != nil {
		return nil, err
	}
	tmpl, err := bundle.CATemplate(pkix.Name{CommonName: signerName + " " + now.UTC().Format("2006-01-02T15:04:05Z"), Organization: []string{"trustsync"}}, now, validity)
	if err != nil {
		return nil, err
	}
	tmpl.PublicKey = key.Public()
	_, cert, err := pki.SignCertificate(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("failed to self-sign the CA for %s: %w", signerName, err)
	}
	return &CA{Cert: cert, Key: key, KeyRef: where}, nil
}

// encodeCerts writes certificates as PEM, every one of them. (cert-manager's
// EncodeX509Chain leaves self-signed certificates out, as a TLS chain should; a stored
// root CA must not vanish.)
func encodeCerts(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// encodeCA returns the certificate (with its chain) and key as PEM; no key PEM for a
// key in a keeper.
func encodeCA(ca *CA) (certPEM, keyPEM []byte, err error) {
	certPEM = encodeCerts(append([]*x509.Certificate{ca.Cert}, ca.Chain...)...)
	if ca.KeyRef != "" {
		return certPEM, nil, nil
	}
	keyPEM, err = bundle.EncodePrivateKey(ca.Key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// decodeCA parses a certificate chain, finds its key (the PEM, or where a keeper
// holds it), and checks that they belong together and can sign.
func decodeCA(ctx context.Context, certPEM, keyPEM []byte, where string, keys caKeys) (*CA, error) {
	certs, err := pki.DecodeX509CertificateChainBytes(certPEM)
	if err != nil {
		return nil, fmt.Errorf("cannot parse the CA certificate: %w", err)
	}
	ca := &CA{Cert: certs[0], Chain: certs[1:]}
	if !ca.Cert.IsCA || !ca.Cert.BasicConstraintsValid || ca.Cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("certificate %q is not a CA that may sign certificates (it needs the CA bit and the certSign key usage)", ca.Cert.Subject)
	}
	if ca.Key, ca.KeyRef, err = keys.resolve(ctx, ca.Cert, keyPEM, where); err != nil {
		return nil, err
	}
	return ca, nil
}
