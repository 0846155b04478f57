package bundle

import (
	"bytes"
	"strings"
	"testing"

	"github.com/trustsync/trustsync/test/fixtures"
)

// seeds are inputs that reach every branch of the parsers; `go test` runs them as
// ordinary tests, `make fuzz` grows from them.
func seeds() []string {
	good := fixtures.Bundle(caA, caB)
	return []string{
		"",
		"no pem at all",
		good,
		"lead\n" + good + "tail",
		fixtures.Bundle(caA, caA),
		fixtures.Bundle(leaf),
		fixtures.Bundle(noBC),
		keyPB,
		fixtures.Block("CERTIFICATE", caA.Cert.Raw, map[string]string{"A": "b"}),
		fixtures.Block("CERTIFICATE", []byte("junk"), nil),
		good[:len(good)/2],
		"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
		strings.Repeat("-----BEGIN CERTIFICATE-----\n", 3),
	}
}

// FuzzValidateTrustBundle checks that validation never panics and agrees with the
// merge path: whatever validates decodes, merges to itself, and re-validates.
func FuzzValidateTrustBundle(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		errs := ValidateTrustBundle(trustBundlePath, in)
		if len(in) > MaxTrustBundleSize && len(errs) != 1 {
			t.Fatalf("over-long input gave %d errors, want exactly the size error", len(errs))
		}
		if len(errs) != 0 {
			return
		}
		ders, err := DecodeCertificates([]byte(in))
		if err != nil || len(ders) == 0 {
			t.Fatalf("a valid bundle does not decode: %d certificates, %v", len(ders), err)
		}
		p := NewPool()
		for _, der := range ders {
			if !p.AddDER(der) {
				t.Fatal("a valid bundle holds a duplicate")
			}
		}
		merged := p.PEM()
		if errs := ValidateTrustBundle(trustBundlePath, string(merged)); len(errs) != 0 {
			t.Fatalf("the merge of a valid bundle is invalid: %v", errs)
		}
	})
}

// FuzzDecodeCertificates checks that decoding never panics and that merging is a
// fixed point: decoding the merged output and merging again gives the same bytes.
func FuzzDecodeCertificates(f *testing.F) {
	for _, s := range seeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		p := NewPool()
		if err := p.AddPEM(in); err != nil {
			if !IsInvalidPEM(err) {
				t.Fatalf("error is not an InvalidPEMError: %v", err)
			}
			return
		}
		once := p.PEM()
		again := NewPool()
		if err := again.AddPEM(once); err != nil {
			t.Fatalf("merged output does not decode: %v", err)
		}
		if again.Len() != p.Len() || !bytes.Equal(again.PEM(), once) {
			t.Fatal("merging is not a fixed point")
		}
	})
}
