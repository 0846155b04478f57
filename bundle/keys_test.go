package bundle

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"strings"
	"testing"
	"time"
)

func TestNewSerialNumber_IsPositiveAtMost127BitsAndFresh(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		n, err := NewSerialNumber()
		if err != nil {
			t.Fatal(err)
		}
		if n.Sign() < 0 || n.BitLen() > 127 {
			t.Fatalf("serial %s: want 0 <= n < 2^127 (RFC 5280: positive, at most 20 octets)", n)
		}
		if seen[n.String()] {
			t.Fatalf("serial %s drawn twice in 1,000", n)
		}
		seen[n.String()] = true
	}
}

// otherSigner is a key type PKCS#8 cannot hold.
type otherSigner struct{}

func (otherSigner) Public() crypto.PublicKey                                  { return nil }
func (otherSigner) Sign(io.Reader, []byte, crypto.SignerOpts) ([]byte, error) { return nil, nil }

func TestEncodePrivateKey_WritesPKCS8EveryKeyTypeReadsBack(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rs, _ := rsa.GenerateKey(rand.Reader, 2048)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	for _, key := range []crypto.Signer{ec, rs, ed} {
		data, err := EncodePrivateKey(key)
		if err != nil {
			t.Fatalf("%T: %v", key, err)
		}
		block, rest := pem.Decode(data)
		if block == nil || block.Type != "PRIVATE KEY" || len(rest) != 0 {
			t.Fatalf("%T: not one PRIVATE KEY block: %q", key, data)
		}
		back, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			t.Fatalf("%T: %v", key, err)
		}
		if !key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(back.(crypto.Signer).Public()) {
			t.Errorf("%T: the key read back is another key", key)
		}
	}
	if _, err := EncodePrivateKey(otherSigner{}); err == nil || !strings.Contains(err.Error(), "bundle.otherSigner") {
		t.Errorf("an unsupported key: err = %v, want it to name the type", err)
	}
}

func TestCATemplate_IsABackdatedLeafOnlyCAWithAFreshSerial(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	a, err := CATemplate(pkix.Name{CommonName: "test CA"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b, err := CATemplate(pkix.Name{CommonName: "test CA"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if a.SerialNumber.Cmp(b.SerialNumber) == 0 {
		t.Error("two templates share a serial number")
	}
	der, err := x509.CreateCertificate(rand.Reader, a, a, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || !ca.BasicConstraintsValid || ca.MaxPathLen != 0 || !ca.MaxPathLenZero {
		t.Errorf("IsCA %v, basic constraints %v, path length %d (zero %v); want a CA that signs leaves only", ca.IsCA, ca.BasicConstraintsValid, ca.MaxPathLen, ca.MaxPathLenZero)
	}
	if ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("key usage %b lacks certSign", ca.KeyUsage)
	}
	if !ca.NotBefore.Equal(now.Add(-Backdate)) || !ca.NotAfter.Equal(now.Add(time.Hour)) {
		t.Errorf("valid %s to %s, want %s to %s", ca.NotBefore, ca.NotAfter, now.Add(-Backdate), now.Add(time.Hour))
	}
}
