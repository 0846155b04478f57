package bundle

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
)

// The three binaries make certificates and keys of their own (the signer its CA and
// leaves, the webhook its self-managed serving pair, the sidecar its workload key);
// these two are the one way each of them numbers a certificate and writes a key.

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
