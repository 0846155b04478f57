package truststore

import (
	"bytes"
	"crypto/fips140"
	"crypto/x509"
	"crypto/x509/pkix"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pavlo-v-chernykh/keystore-go/v4"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/fixtures"
)

func anchorsOf(certs ...*fixtures.Cert) []*bundle.Anchor {
	out := make([]*bundle.Anchor, len(certs))
	for i, c := range certs {
		out[i] = bundle.NewAnchor(c.Cert.Raw)
	}
	return out
}

type format struct {
	name   string
	encode func([]*bundle.Anchor, string) ([]byte, error)
	decode func([]byte, string) ([][]byte, error)
}

func pkcs12Profile(profile string) func([]*bundle.Anchor, string) ([]byte, error) {
	return func(anchors []*bundle.Anchor, password string) ([]byte, error) {
		return EncodePKCS12(anchors, password, profile)
	}
}

var formats = []format{
	{"pkcs12-" + Modern2023, pkcs12Profile(Modern2023), DecodePKCS12},
	{"pkcs12-" + Modern2026, pkcs12Profile(Modern2026), DecodePKCS12},
	{"jks", EncodeJKS, DecodeJKS},
}

// inFIPSMode says whether f cannot be written in this process: JKS in strict FIPS
// 140-3 mode (GODEBUG=fips140=only), whose SHA-1 integrity check the mode refuses; then
// encoding it must fail, never write a store the mode forbids.
func inFIPSMode(t *testing.T, f format) bool {
	t.Helper()
	if !fips140.Enforced() || f.name != "jks" {
		return false
	}
	if _, err := f.encode(nil, "changeit"); err == nil {
		t.Fatal("strict FIPS 140-3 mode wrote a JKS store")
	}
	return true
}

func TestEncode_HoldsEveryAnchorAsATrustedEntry(t *testing.T) {
	certs := []*fixtures.Cert{fixtures.CA("Corp Root CA"), fixtures.CA("Partner Root"), fixtures.CA("Partner Root")}
	for _, f := range formats {
		if inFIPSMode(t, f) {
			continue
		}
		for _, password := range []string{"changeit", "a longer password from a Secret"} {
			t.Run(f.name+"/"+password, func(t *testing.T) {
				data, err := f.encode(anchorsOf(certs...), password)
				if err != nil {
					t.Fatal(err)
				}
				got, err := f.decode(data, password)
				if err != nil {
					t.Fatalf("cannot read back the store: %v", err)
				}
				if len(got) != len(certs) {
					t.Fatalf("store holds %d certificates, want %d", len(got), len(certs))
				}
				for _, c := range certs {
					if !slices.ContainsFunc(got, func(der []byte) bool { return bytes.Equal(der, c.Cert.Raw) }) {
						t.Errorf("store lacks %q", c.Cert.Subject.CommonName)
					}
				}
				if _, err := f.decode(data, "wrong"); err == nil {
					t.Error("the store opens with a wrong password")
				}
			})
		}
	}
}

func TestEncode_AnEmptySetIsAnEmptyStore(t *testing.T) {
	for _, f := range formats {
		if inFIPSMode(t, f) {
			continue
		}
		data, err := f.encode(nil, "changeit")
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if got, err := f.decode(data, "changeit"); err != nil || len(got) != 0 {
			t.Errorf("%s: read back %d certificates, %v; want an empty store", f.name, len(got), err)
		}
	}
}

// Only JKS is deterministic; a PKCS#12 store is salted anew each time, which is why
// the sidecar rewrites a store only when its set of anchors changes.
func TestEncode_JKSIsDeterministicPKCS12IsSalted(t *testing.T) {
	anchors := anchorsOf(fixtures.CA("a"), fixtures.CA("b"))
	if !inFIPSMode(t, formats[2]) {
		j1, _ := EncodeJKS(anchors, "changeit")
		j2, _ := EncodeJKS(anchors, "changeit")
		if !bytes.Equal(j1, j2) {
			t.Error("the same anchors and password gave two JKS encodings")
		}
	}
	for _, profile := range []string{Modern2023, Modern2026} {
		p1, _ := EncodePKCS12(anchors, "changeit", profile)
		p2, _ := EncodePKCS12(anchors, "changeit", profile)
		if bytes.Equal(p1, p2) {
			t.Errorf("two PKCS#12 %s encodings are equal; the salt is gone?", profile)
		}
	}
}

// Each profile writes the MAC it names: PBMAC1 for Modern2026, which FIPS 140-3 mode
// allows, and PKCS#12's own for Modern2023; an unknown profile writes nothing.
func TestEncodePKCS12_WritesTheMACItsProfileNames(t *testing.T) {
	anchors := anchorsOf(fixtures.CA("a"))
	pbmac1 := []byte{0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x05, 0x0e} // OID 1.2.840.113549.1.5.14
	for profile, want := range map[string]bool{Modern2023: false, Modern2026: true} {
		data, err := EncodePKCS12(anchors, "changeit", profile)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(data, pbmac1); got != want {
			t.Errorf("%s: PBMAC1 present = %v, want %v", profile, got, want)
		}
	}
	if _, err := EncodePKCS12(anchors, "changeit", "LegacyRC2"); err == nil || !strings.Contains(err.Error(), `"LegacyRC2"`) {
		t.Errorf("an unknown profile = %v, want an error naming it", err)
	}
}

func TestAlias(t *testing.T) {
	// Alias reads what the anchor kept of the subject, and its sum; subjects the
	// fixtures would not make are built directly.
	subject := func(name pkix.Name) *bundle.Anchor {
		cert := fixtures.CA("x").Cert
		cert.Subject = name
		a := bundle.NewAnchor(cert.Raw)
		a.Name = name.CommonName
		if a.Name == "" && len(name.Organization) > 0 {
			a.Name = name.Organization[0]
		}
		return a
	}
	anchor := func(c *fixtures.Cert) *bundle.Anchor { return bundle.NewAnchor(c.Cert.Raw) }
	tests := []struct {
		name   string
		anchor *bundle.Anchor
		want   string // the readable part; the hash follows
	}{
		{"the common name, lower case, punctuation folded to one dash", anchor(fixtures.CA("Corp Root CA: G2 (2026)")), "corp-root-ca-g2-2026"},
		{"the organization when there is no common name", subject(pkix.Name{Organization: []string{"Example Corp"}}), "example-corp"},
		{"anchor when the subject names nothing", subject(pkix.Name{Country: []string{"DE"}}), "anchor"},
		{"a long name cut to 40 characters", anchor(fixtures.CA(strings.Repeat("abcdefghi ", 10))), "abcdefghi-abcdefghi-abcdefghi-abcdefghi"},
		{"nothing but punctuation", anchor(fixtures.CA("***")), "anchor"},
	}
	shape := regexp.MustCompile(`^[a-z0-9-]+-[0-9a-f]{12}$`)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Alias(tc.anchor)
			if !strings.HasPrefix(got, tc.want+"-") || len(got) != len(tc.want)+13 || !shape.MatchString(got) {
				t.Errorf("Alias = %q, want %q followed by a dash and 12 hex digits", got, tc.want)
			}
		})
	}
	sameName := []*bundle.Anchor{anchor(fixtures.CA("Root")), anchor(fixtures.CA("Root"))}
	if Alias(sameName[0]) == Alias(sameName[1]) {
		t.Error("two anchors with one subject share an alias")
	}
}

// An anchor keeps its alias whatever else the store holds and in either format, so a
// reader that looks an anchor up by alias finds it after every rewrite.
func TestAlias_StableAcrossRewritesAndFormats(t *testing.T) {
	if fipsEnforced() {
		t.Skip("strict FIPS 140-3 mode writes no JKS store: TestDecode_StrictFIPSModeRefusesStoresWithSHA1")
	}
	a, b, c := fixtures.CA("a"), fixtures.CA("b"), fixtures.CA("c")
	aliasesIn := func(t *testing.T, anchors []*bundle.Anchor) map[string]string {
		t.Helper()
		data, err := EncodeJKS(anchors, "changeit")
		if err != nil {
			t.Fatal(err)
		}
		ks := keystore.New()
		if err := ks.Load(bytes.NewReader(data), []byte("changeit")); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, alias := range ks.Aliases() {
			e, _ := ks.GetTrustedCertificateEntry(alias)
			cert, _ := x509.ParseCertificate(e.Certificate.Content)
			out[cert.Subject.CommonName] = alias
		}
		return out
	}
	before := aliasesIn(t, anchorsOf(a, b))
	after := aliasesIn(t, anchorsOf(c, b, a))
	for _, cn := range []string{"a", "b"} {
		if before[cn] != after[cn] || before[cn] != Alias(bundle.NewAnchor(map[string]*fixtures.Cert{"a": a, "b": b}[cn].Cert.Raw)) {
			t.Errorf("anchor %q: alias %q before, %q after another anchor was added and the order changed", cn, before[cn], after[cn])
		}
	}
}
