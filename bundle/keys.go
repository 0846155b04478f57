package bundle

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"
)

// The three binaries make certificates and keys of their own (the signer its CA and
// leaves, the webhook its self-managed serving pair, the sidecar its workload key);
// these are the one way each of them shapes a CA, numbers a certificate and writes a
// key. (The signer's leaves come from cert-manager's pki, which serves the signer
// alone; the webhook must not link cert-manager.)

// Backdate is how far before "now" a certificate's validity starts, so that a peer
// whose clock runs a little behind does not reject it as not yet valid.
const Backdate = 5 * time.Minute

// CATemplate is the template of every CA trustsync makes: a fresh serial number,
// valid from now (backdated) for validity, allowed to sign leaves only (path length
// zero), since trustsync never issues intermediates.
func CATemplate(subject pkix.Name, now time.Time, validity time.Duration) (*x509.Certificate, error) {
	serial, err := NewSerialNumber()
	if err != nil {
		return nil, err
	}
	return &x509.Certificate{
		SerialNumber:          serial,
		Subject:               subject,
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}, nil
}

// serialLimit bounds serial numbers to 127 bits: positive and at most 20 octets, as
// RFC 5280 requires, with more entropy than the CA/Browser Forum's 64 bits.
var serialLimit = new(big.Int).Lsh(big.NewInt(1), 127)

// NewSerialNumber returns a random certificate serial number.
func NewSerialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, serialLimit)
	if err != nil {
		return nil, fmt.Errorf("cannot draw a certificate serial number: %w", err)
	}
	return n, nil
}

// EncodePrivateKey writes key as a PKCS#8 "PRIVATE KEY" PEM block, the form every
// key type shares and kubernetes.io/tls Secrets and TLS libraries read.
func EncodePrivateKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("cannot encode a %T private key: %w", key, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
