package bundle

import (
	"strings"
	"testing"

	"github.com/trustsync/trustsync/test/fixtures"
)

// distinctAnchors returns n distinct CA certificates as one PEM bundle.
func distinctAnchors(b *testing.B, n int) string {
	b.Helper()
	var sb strings.Builder
	for range n {
		sb.WriteString(fixtures.Bundle(fixtures.CA("bench anchor")))
	}
	return sb.String()
}

// bundleOfSize returns a valid bundle of distinct anchors as close to size bytes as
// whole certificates allow.
func bundleOfSize(b *testing.B, size int) (string, int) {
	b.Helper()
	var sb strings.Builder
	n := 0
	for {
		next := fixtures.Bundle(fixtures.CA("bench anchor"))
		if sb.Len()+len(next) > size {
			return sb.String(), n
		}
		sb.WriteString(next)
		n++
	}
}

// benchMerge measures what a sidecar does on every change: decode each source,
// dedupe into a pool, encode the file.
func benchMerge(b *testing.B, sources ...string) {
	b.ReportAllocs()
	total := 0
	for _, s := range sources {
		total += len(s)
	}
	b.SetBytes(int64(total))
	b.ResetTimer()
	for b.Loop() {
		p := NewPool()
		for _, s := range sources {
			if err := p.AddPEM([]byte(s)); err != nil {
				b.Fatal(err)
			}
		}
		_ = p.PEM()
	}
}

// A 150-anchor bundle, about the size of a public web-roots bundle.
func BenchmarkMerge_150Anchors(b *testing.B) {
	benchMerge(b, distinctAnchors(b, 150))
}

// Two overlapping 150-anchor sources, as a rotation publishes old and new together.
func BenchmarkMerge_150AnchorsTwoOverlappingSources(b *testing.B) {
	s := distinctAnchors(b, 150)
	benchMerge(b, s, s)
}

// The largest bundle the API server accepts.
func BenchmarkMerge_1MiB(b *testing.B) {
	s, n := bundleOfSize(b, MaxTrustBundleSize)
	benchMerge(b, s)
	// After the loop: ResetTimer clears metrics reported before it.
	b.ReportMetric(float64(n), "anchors")
}

func BenchmarkValidateTrustBundle_150Anchors(b *testing.B) {
	s := distinctAnchors(b, 150)
	b.ReportAllocs()
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if errs := ValidateTrustBundle(trustBundlePath, s); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
}

func BenchmarkValidateTrustBundle_1MiB(b *testing.B) {
	s, _ := bundleOfSize(b, MaxTrustBundleSize)
	b.ReportAllocs()
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if errs := ValidateTrustBundle(trustBundlePath, s); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
}
