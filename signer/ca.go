package signer

import (
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/cert-manager/cert-manager/pkg/util/pki"

	"github.com/trustsync/trustsync/bundle"
)

// CA is a signing certificate with its key and the chain above it (empty for a root).
type CA struct {
	Cert  *x509.Certificate
	Key   crypto.Signer
	Chain []*x509.Certificate
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

// generateCA makes a self-signed ECDSA P-256 CA for signerName, valid from now for
// validity.
func generateCA(signerName string, now time.Time, validity time.Duration) (*CA, error) {
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		return nil, fmt.Errorf("failed to generate a CA key: %w", err)
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
	return &CA{Cert: cert, Key: key}, nil
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

// encodeCA returns the certificate (with its chain) and key as PEM.
func encodeCA(ca *CA) (certPEM, keyPEM []byte, err error) {
	certPEM = encodeCerts(append([]*x509.Certificate{ca.Cert}, ca.Chain...)...)
	keyPEM, err = bundle.EncodePrivateKey(ca.Key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// decodeCA parses a certificate chain and key, as a kubernetes.io/tls Secret holds
// them, and checks that they belong together and can sign.
func decodeCA(certPEM, keyPEM []byte) (*CA, error) {
	certs, err := pki.DecodeX509CertificateChainBytes(certPEM)
	if err != nil {
		return nil, fmt.Errorf("cannot parse the CA certificate: %w", err)
	}
	key, err := pki.DecodePrivateKeyBytes(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("cannot parse the CA key: %w", err)
	}
	ca := &CA{Cert: certs[0], Key: key, Chain: certs[1:]}
	if ok, err := pki.PublicKeyMatchesCertificate(key.Public(), ca.Cert); err != nil || !ok {
		return nil, errors.New("the CA key does not match the CA certificate")
	}
	if !ca.Cert.IsCA || !ca.Cert.BasicConstraintsValid || ca.Cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("certificate %q is not a CA that may sign certificates (it needs the CA bit and the certSign key usage)", ca.Cert.Subject)
	}
	return ca, nil
}
