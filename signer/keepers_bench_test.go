package signer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"net/url"
	"testing"
	"time"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/keyuri"
	"github.com/trustsync/trustsync/signer/keeper"
	"github.com/trustsync/trustsync/test/localkms"
)

// BenchmarkIssue_ByKeeper is the cost of where a CA key lives: leaves signed per
// second through CA.issue (the one issuance path) with the key in the Secret (in
// memory), in a PKCS#11 token (SoftHSM2) and in a KMS (local-kms over loopback HTTP),
// side by side in one run. The signer's throughput through the API is
// BenchmarkSigning's (test/e2e/signer).
func BenchmarkIssue_ByKeeper(b *testing.B) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		keys func(b *testing.B) caKeys
	}{
		{"secret", func(*testing.B) caKeys { return caKeys{} }},
		{"pkcs11", func(b *testing.B) caKeys { k, _ := tokenKeys(b); return k }},
		{"awskms", func(b *testing.B) caKeys {
			kms := localkms.Start(b)
			ref, err := keyuri.Parse(kms.KeyRef("bench"))
			if err != nil {
				b.Fatal(err)
			}
			k, err := keeper.Open(ctx, ref)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = k.Close() })
			return caKeys{keeper: k}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ca, err := generateCA(ctx, "example.com/bench", time.Now(), 100*time.Hour, tc.keys(b), true)
			if err != nil {
				b.Fatal(err)
			}
			leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			id, _ := url.Parse("spiffe://cluster.local/ns/apps/sa/web")
			b.ResetTimer()
			for b.Loop() {
				serial, _ := bundle.NewSerialNumber()
				tmpl := &x509.Certificate{SerialNumber: serial, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), URIs: []*url.URL{id}, BasicConstraintsValid: true}
				if _, _, err := ca.issue(tmpl, leafKey.Public()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "leaves/s")
		})
	}
}
