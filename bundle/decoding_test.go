package bundle

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trustsync/trustsync/test/fixtures"
)

// assertDecodesAsFromScratch decodes text from scratch and as an edit of prevText, and
// fails on any difference: anchors, their order and hashes, or the error.
func assertDecodesAsFromScratch(t *testing.T, prevText, text string) {
	t.Helper()
	prev, err := DecodeEdited(prevText, nil)
	if err != nil {
		return // only good decodings are kept as bases
	}
	want, wantErr := DecodeEdited(text, nil)
	got, gotErr := DecodeEdited(text, prev)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("as an edit: error %v; from scratch: %v", gotErr, wantErr)
	}
	if wantErr != nil {
		return
	}
	if len(got.blocks) != len(want.blocks) {
		t.Fatalf("as an edit: %d anchors; from scratch: %d", len(got.blocks), len(want.blocks))
	}
	for i := range want.blocks {
		g, w := got.blocks[i], want.blocks[i]
		if g.end != w.end || g.anchor.Sum != w.anchor.Sum || string(g.anchor.pem) != string(w.anchor.pem) {
			t.Fatalf("anchor %d: as an edit ends at %d (%x); from scratch at %d (%x)", i, g.end, g.anchor.Sum[:4], w.end, w.anchor.Sum[:4])
		}
	}
}

func TestDecodeEdited_DecodesAsFromScratch(t *testing.T) {
	a, b, c, d := fixtures.Bundle(fixtures.CA("a")), fixtures.Bundle(fixtures.CA("b")), fixtures.Bundle(fixtures.CA("c")), fixtures.Bundle(fixtures.CA("d"))
	key := "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIBvGXtUGHwq4bFfK4Zv6t3ZQ3N7oT1g0nZKc5yS+fRk+\n-----END PRIVATE KEY-----\n"
	notX509 := "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
	noNewline := strings.TrimSuffix(c, "\n")
	for _, tc := range []struct{ name, prev, text string }{
		{"one anchor in the middle replaced", a + b + c, a + d + c},
		{"the first anchor replaced", a + b + c, d + b + c},
		{"the last anchor replaced", a + b + c, a + b + d},
		{"an anchor added at the end", a + b, a + b + c},
		{"an anchor added at the start", b + c, a + b + c},
		{"an anchor removed", a + b + c, a + c},
		{"every anchor removed", a + b, ""},
		{"from nothing", "", a + b},
		{"unchanged", a + b + c, a + b + c},
		{"only the text between blocks changed", a + "comment\n" + b, a + "another comment\n" + b},
		{"text after the last block changed", a + b + "trailer\n", a + b + "other\n"},
		{"a private key put in the middle is refused", a + b + c, a + key + c},
		{"a block that is not X.509 is refused", a + b + c, a + notX509 + c},
		{"a last block without a newline, then more text on its END line", a + noNewline, a + noNewline + "trailing\n" + b},
		{"a last block without a newline gains one", a + noNewline, a + c},
		{"an END line broken in the middle", a + b + c, a + strings.Replace(b, "-----END CERTIFICATE-----", "-----END CERTIF", 1) + c},
		{"a BEGIN line broken", a + b + c, a + strings.Replace(b, "-----BEGIN CERTIFICATE-----", "-----BEGIN", 1) + c},
		{"the same anchor twice, one copy removed", a + b + a, a + b},
		{"an edit that makes two blocks one", a + b + c, a + strings.TrimSuffix(b, "-----END CERTIFICATE-----\n") + c},
	} {
		t.Run(tc.name, func(t *testing.T) { assertDecodesAsFromScratch(t, tc.prev, tc.text) })
	}
}

func TestDecodeEdited_ReusesTheAnchorsAnEditDidNotTouch(t *testing.T) {
	a, b, c, d := fixtures.Bundle(fixtures.CA("a")), fixtures.Bundle(fixtures.CA("b")), fixtures.Bundle(fixtures.CA("c")), fixtures.Bundle(fixtures.CA("d"))
	prev, err := DecodeEdited(a+b+c, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeEdited(a+d+c, prev)
	if err != nil {
		t.Fatal(err)
	}
	if got.blocks[0].anchor != prev.blocks[0].anchor || got.blocks[2].anchor != prev.blocks[2].anchor {
		t.Error("the unchanged first and last anchors were decoded again instead of reused")
	}
	if got.blocks[1].anchor == prev.blocks[1].anchor {
		t.Error("the replaced anchor was reused")
	}
}

func FuzzDecodeEdited(f *testing.F) {
	a, b, c := fixtures.Bundle(fixtures.CA("a")), fixtures.Bundle(fixtures.CA("b")), fixtures.Bundle(fixtures.CA("c"))
	f.Add(a+b+c, a+c)
	f.Add(a+b, a+"x\n"+b)
	f.Add(a+strings.TrimSuffix(b, "\n"), a+b+c)
	f.Add(a, "")
	f.Fuzz(func(t *testing.T, prev, text string) {
		assertDecodesAsFromScratch(t, prev, text)
	})
}

// BenchmarkDecodeEdited_1MiBOneAnchorChanged is a sidecar's re-merge after a rotation
// replaced one anchor of the largest bundle the API accepts: decode the edited text
// against the last decoding, merge into a pool and encode the file.
func BenchmarkDecodeEdited_1MiBOneAnchorChanged(b *testing.B) {
	text, n := bundleOfSize(b, MaxTrustBundleSize-2048)
	prev, err := DecodeEdited(text, nil)
	if err != nil {
		b.Fatal(err)
	}
	// Replace the middle anchor.
	mid := prev.blocks[n/2]
	start := prev.blocks[n/2-1].end
	edited := text[:start] + fixtures.Bundle(fixtures.CA("rotated")) + text[mid.end:]
	b.ReportAllocs()
	b.SetBytes(int64(len(edited)))
	for b.Loop() {
		d, err := DecodeEdited(edited, prev)
		if err != nil {
			b.Fatal(err)
		}
		p := NewPool()
		for _, a := range d.Anchors() {
			p.AddAnchor(a)
		}
		_ = p.PEM()
	}
	b.ReportMetric(float64(n), "anchors")
}

func TestPool_EarliestNotAfterIsTheFirstAnchorToExpire(t *testing.T) {
	soon := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	later := fixtures.CA("later")
	first := fixtures.MustNew(fixtures.Options{CommonName: "soon", NotAfter: soon})
	for _, tc := range []struct {
		name string
		add  func(p *Pool)
		want time.Time
	}{
		{"decoded from PEM", func(p *Pool) { _ = p.AddPEM([]byte(fixtures.Bundle(later, first))) }, soon},
		{"added as DER", func(p *Pool) { p.AddDER(later.Cert.Raw); p.AddDER(first.Cert.Raw) }, soon},
		{"an empty pool has none", func(*Pool) {}, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPool()
			tc.add(p)
			if got := p.EarliestNotAfter(); !got.Equal(tc.want) {
				t.Errorf("earliest notAfter %s, want %s", got, tc.want)
			}
		})
	}
}
