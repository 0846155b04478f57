package keyscan

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
)

// A private key is found in any encoding, under any PEM type, anywhere in a value
// (inside JSON, after other text); a public key or a certificate is no private key.
func TestHolding_FindsAKeyWhateverItsEncodingAndWhereverItStarts(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(ec)
	sec1, _ := x509.MarshalECPrivateKey(ec)
	pub, _ := x509.MarshalPKIXPublicKey(ec.Public())
	block := func(typ string, der []byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
	}
	ca := &x509.Certificate{PublicKey: ec.Public()}
	rsaCA := &x509.Certificate{PublicKey: rsaKey.Public()}

	for _, tc := range []struct {
		name, value string
		cas         []*x509.Certificate
		found       bool
	}{
		{"PKCS#8", block("PRIVATE KEY", pkcs8), []*x509.Certificate{ca}, true},
		{"SEC 1 under a misleading type", block("CERTIFICATE", sec1), []*x509.Certificate{ca}, true},
		{"PKCS#1 inside JSON", `{"k":"` + strings.ReplaceAll(block("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey)), "\n", "\n") + `"}`, []*x509.Certificate{rsaCA}, true},
		{"after a broken block", "-----BEGIN junk\n" + block("PRIVATE KEY", pkcs8), []*x509.Certificate{ca}, true},
		{"only the public key", block("PUBLIC KEY", pub), []*x509.Certificate{ca}, false},
		{"another CA's key", block("PRIVATE KEY", pkcs8), []*x509.Certificate{{PublicKey: other.Public()}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Holding(map[string][]byte{"Secret x/y tls.key": []byte(tc.value)}, tc.cas)
			if (len(got) > 0) != tc.found {
				t.Errorf("found %v, want found %v", got, tc.found)
			}
		})
	}
}
