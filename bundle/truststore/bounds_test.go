package truststore

import (
	"bytes"
	"crypto/fips140"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"software.sslmate.com/src/go-pkcs12"

	"github.com/trustsync/trustsync/test/fixtures"
)

// decodeOrHang runs decode, failing the test (instead of hanging it) when a decoder
// is still deriving or allocating after a minute: that is the defect, not slowness.
func decodeOrHang(t *testing.T, decode func() ([][]byte, error)) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := decode(); done <- err }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the decoder still runs after a minute: what the store asks for was not bounded")
		return nil
	}
}

// pkcs12With encodes anchors with profile at iterations (a three-byte DER integer,
// 65,536 to 8,388,607), then, when patch is not zero, rewrites the first (which) or
// last (mac) occurrence of that integer to patch: the store then asks for patch
// iterations where the encoder used the first count, as a hostile store would.
func pkcs12With(t *testing.T, profile *pkcs12.Encoder, iterations, patch int, mac bool) []byte {
	t.Helper()
	data, err := encodeAnyway(profile.WithIterations(iterations))
	if err != nil {
		t.Fatal(err)
	}
	if patch == 0 {
		return data
	}
	der := func(n int) []byte { return []byte{0x02, 0x03, byte(n >> 16), byte(n >> 8), byte(n)} }
	i := bytes.Index(data, der(iterations))
	if mac {
		i = bytes.LastIndex(data, der(iterations))
	}
	if i < 0 || bytes.Count(data, der(iterations)) != 2 {
		t.Fatalf("the store does not hold its iteration count %d exactly twice (encryption and MAC)", iterations)
	}
	copy(data[i:], der(patch))
	return data
}

func TestDecodePKCS12_RefusesAStoreAskingForMoreIterationsThanAllowed(t *testing.T) {
	const legit, hostile = 1 << 16, 1<<23 - 1
	tests := []struct {
		name string
		data func(t *testing.T) []byte
		want string // in the refusal
	}{
		{"a MAC iterated more than allowed", func(t *testing.T) []byte { return pkcs12With(t, pkcs12.Modern2023, legit, hostile, true) }, "the MAC asks for 8388607 iterations"},
		{"a PBMAC1 MAC iterated more than allowed", func(t *testing.T) []byte { return pkcs12With(t, pkcs12.Modern2026, legit, hostile, true) }, "the MAC (PBMAC1) asks for 8388607"},
		{"PBES2 content encryption iterated more than allowed", func(t *testing.T) []byte { return pkcs12With(t, pkcs12.Modern2023, legit, hostile, false) }, "the encryption of content 1 asks for 8388607"},
		{"legacy PKCS#12 encryption iterated more than allowed", func(t *testing.T) []byte { return pkcs12With(t, pkcs12.LegacyDES, legit, hostile, false) }, "the encryption of content 1 asks for 8388607"},
		{"a store larger than allowed", func(*testing.T) []byte { return make([]byte, MaxStoreBytes+1) }, "4194305 bytes, more than the 4194304"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.data(t)
			err := decodeOrHang(t, func() ([][]byte, error) { return DecodePKCS12(data, "changeit") })
			if fipsEnforced() && strings.HasPrefix(tc.name, "legacy") {
				// Strict FIPS 140-3 mode refuses the store sooner, by its SHA-1 MAC.
				if !errors.Is(err, ErrFIPS) {
					t.Fatalf("DecodePKCS12 = %v, want ErrFIPS", err)
				}
				return
			}
			if !errors.Is(err, ErrOutOfBounds) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DecodePKCS12 = %v, want out of bounds: %q", err, tc.want)
			}
		})
	}
}

// The attack as it was found: 2^62 MAC iterations, which the library took from the
// file and spun on for ever. It does not fit the patch above, so it is built whole.
func TestDecodePKCS12_RefusesTwoToTheSixtySecondMACIterations(t *testing.T) {
	data := pkcs12With(t, pkcs12.Modern2023, 1<<16, 0, false)
	var p pfx
	if _, err := asn1.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	p.MacData.Iterations = 1 << 62
	hostile, err := asn1.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	err = decodeOrHang(t, func() ([][]byte, error) { return DecodePKCS12(hostile, "changeit") })
	if !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("DecodePKCS12 = %v, want out of bounds", err)
	}
}

func TestDecodePKCS12_OpensStoresWithinBounds(t *testing.T) {
	for _, tc := range []struct {
		name       string
		profile    *pkcs12.Encoder
		iterations int
	}{
		{"Java's default count", pkcs12.Modern2023, 10_000},
		{"the largest count allowed", pkcs12.Modern2023, MaxIterations},
		{"the largest count allowed, PBMAC1", pkcs12.Modern2026, MaxIterations},
		{"the largest count allowed, legacy", pkcs12.LegacyDES, MaxIterations},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := encodeAnyway(tc.profile.WithIterations(tc.iterations))
			if err != nil {
				t.Fatal(err)
			}
			if tc.profile == pkcs12.LegacyDES && fipsEnforced() {
				if _, err := DecodePKCS12(data, "changeit"); !errors.Is(err, ErrFIPS) {
					t.Fatalf("strict FIPS 140-3 mode: DecodePKCS12 of a legacy store = %v, want ErrFIPS", err)
				}
				return
			}
			if got, err := DecodePKCS12(data, "changeit"); err != nil || len(got) != 1 {
				t.Fatalf("DecodePKCS12 = %d certificates, %v; want the one anchor", len(got), err)
			}
		})
	}
}

// encodeAnyway writes a store as a tenant may have, whatever this process's FIPS 140-3
// mode would allow it to write: what is tested is how it is read.
func encodeAnyway(enc *pkcs12.Encoder) (data []byte, err error) {
	fips140.WithoutEnforcement(func() {
		data, err = enc.EncodeTrustStoreEntries([]pkcs12.TrustStoreEntry{{Cert: fixtures.CA("Corp Root").Cert, FriendlyName: "corp"}}, "changeit")
	})
	return data, err
}

// Strict FIPS 140-3 mode reads only what it can without SHA-1: a legacy PKCS#12 store
// and a JKS store are refused with ErrFIPS and how to re-encode them, before any
// library would panic on them; a modern one opens.
func TestDecode_StrictFIPSModeRefusesStoresWithSHA1(t *testing.T) {
	legacyMAC, err := encodeAnyway(pkcs12.LegacyDES)
	if err != nil {
		t.Fatal(err)
	}
	var jksStore []byte
	fips140.WithoutEnforcement(func() { jksStore, err = EncodeJKS(anchorsOf(fixtures.CA("a")), "changeit") })
	if err != nil {
		t.Fatal(err)
	}
	modern, err := encodeAnyway(pkcs12.Modern2026)
	if err != nil {
		t.Fatal(err)
	}
	was := fipsEnforced
	fipsEnforced = func() bool { return true }
	t.Cleanup(func() { fipsEnforced = was })
	if _, err := DecodePKCS12(legacyMAC, "changeit"); !errors.Is(err, ErrFIPS) || !strings.Contains(err.Error(), "re-encode") {
		t.Errorf("a legacy PKCS#12 store = %v, want ErrFIPS saying to re-encode it", err)
	}
	if _, err := DecodeJKS(jksStore, "changeit"); !errors.Is(err, ErrFIPS) || !strings.Contains(err.Error(), "PKCS#12") {
		t.Errorf("a JKS store = %v, want ErrFIPS naming what to use", err)
	}
	if got, err := DecodePKCS12(modern, "changeit"); err != nil || len(got) != 1 {
		t.Errorf("a Modern2026 store = %d certificates, %v; want the one", len(got), err)
	}
}

// jks builds a JKS store by hand, field by field, as a hostile tenant would write it.
type jks struct{ bytes.Buffer }

func (j *jks) u16(v uint16) *jks  { binary.Write(&j.Buffer, binary.BigEndian, v); return j }
func (j *jks) u32(v uint32) *jks  { binary.Write(&j.Buffer, binary.BigEndian, v); return j }
func (j *jks) str(s string) *jks  { j.u16(uint16(len(s))); j.WriteString(s); return j }
func (j *jks) raw(b ...byte) *jks { j.Write(b); return j }

func header(entries uint32) *jks {
	j := &jks{}
	return j.u32(jksMagic).u32(2).u32(entries)
}

func TestDecodeJKS_RefusesLengthsTheBytesCannotHold(t *testing.T) {
	if fipsEnforced() {
		t.Skip("strict FIPS 140-3 mode reads no JKS store: TestDecode_StrictFIPSModeRefusesStoresWithSHA1")
	}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{
			// The store of the report: 35 bytes, and keystore-go reserved room for
			// 4,294,967,295 certificates (172 GB) before reading one.
			"a private-key entry declaring 2^32-1 chain certificates",
			header(1).u32(1).str("a").raw(0, 0, 0, 0, 0, 0, 0, 0).u32(0).u32(0xffffffff).Bytes(),
			"declares 4294967295 chain certificates",
		},
		{
			"a certificate declaring 4 GiB",
			header(1).u32(2).str("a").raw(0, 0, 0, 0, 0, 0, 0, 0).str("X509").u32(0xffffffff).Bytes(),
			"certificate of entry 1 declares 4294967295 bytes",
		},
		{
			"a private key declaring more than is left",
			header(1).u32(1).str("a").raw(0, 0, 0, 0, 0, 0, 0, 0).u32(1 << 30).Bytes(),
			"key of entry 1 declares 1073741824 bytes",
		},
		{"a store larger than allowed", append(header(0).Bytes(), make([]byte, MaxStoreBytes)...), "more than the 4194304"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := decodeOrHang(t, func() ([][]byte, error) { return DecodeJKS(tc.data, "changeit") })
			if !errors.Is(err, ErrOutOfBounds) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DecodeJKS = %v, want out of bounds: %q", err, tc.want)
			}
		})
	}
}

// A store cut short in a header, or foreign, is not out of bounds (one cut short in a
// body is: its length says more than is there): the library refuses it in its
// own words, and the walk must not mistake it for an attack or let it through.
func TestDecodeJKS_LeavesMalformedStoresToTheLibrary(t *testing.T) {
	if fipsEnforced() {
		t.Skip("strict FIPS 140-3 mode reads no JKS store: TestDecode_StrictFIPSModeRefusesStoresWithSHA1")
	}
	good, err := EncodeJKS(anchorsOf(fixtures.CA("a"), fixtures.CA("b")), "changeit")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"truncated in a header": good[:10],
		"not JKS":               []byte("-----BEGIN CERTIFICATE-----"),
		"an unknown entry tag":  header(1).u32(9).Bytes(),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeJKS(data, "changeit")
			if err == nil || errors.Is(err, ErrOutOfBounds) {
				t.Fatalf("DecodeJKS = %v, want the library's refusal", err)
			}
		})
	}
}

// BenchmarkDecode_CostliestStoreWithinBounds is what the costliest store a tenant can
// write costs each reader that decodes it: every derivation at MaxIterations.
func BenchmarkDecode_CostliestStoreWithinBounds(b *testing.B) {
	for _, tc := range []struct {
		name    string
		profile *pkcs12.Encoder
	}{{"pkcs12-modern", pkcs12.Modern2023}, {"pkcs12-pbmac1", pkcs12.Modern2026}, {"pkcs12-legacy", pkcs12.LegacyDES}} {
		data, err := tc.profile.WithIterations(MaxIterations).EncodeTrustStoreEntries(
			[]pkcs12.TrustStoreEntry{{Cert: fixtures.CA("Corp Root").Cert, FriendlyName: "corp"}}, "changeit")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := DecodePKCS12(data, "changeit"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
