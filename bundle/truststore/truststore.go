// Package truststore encodes trust anchors as Java truststores, PKCS#12 and JKS, and
// reads back which certificates a store holds. Each anchor is a trusted certificate
// entry under an alias derived from the certificate alone, so the same anchor keeps
// its alias in every store and every rewrite, whatever else the store holds.
//
// Both encodings come from libraries: go-pkcs12's trust-store encoder with its modern
// profile (PBES2 with AES-256 and a SHA-256 MAC, which Java reads since 8u301 and
// 11.0.12), and keystore-go for JKS. A PKCS#12 store is salted afresh on every
// encoding, so a caller that wants a file to change only when its anchors do must keep
// the bytes it wrote and encode again only when the set changes.
package truststore

import (
	"bytes"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/pavlo-v-chernykh/keystore-go/v4"
	"software.sslmate.com/src/go-pkcs12"

	"github.com/trustsync/trustsync/bundle"
)

// Alias is the entry name of an anchor: a readable part from its name (its subject's
// common name, else organization, else "anchor"), lower case, then the first 12 hex
// digits of the SHA-256 of its DER, which keeps two anchors with the same subject
// apart. JKS folds aliases to lower case, so both formats show the same one.
func Alias(a *bundle.Anchor) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(a.Name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
	}
	slug := b.String()
	if len(slug) > 40 {
		slug = slug[:40]
	}
	slug = strings.TrimSuffix(slug, "-")
	if slug == "" {
		slug = "anchor"
	}
	return slug + "-" + hex.EncodeToString(a.Sum[:6])
}

// The encoders read what the anchors keep (DER, name, notBefore) and parse nothing:
// parsing every anchor of a store at each encoding was most of a sidecar's
// start-up garbage, and its idle memory with it (docs/benchmarks.md).

// PKCS#12 profiles, as go-pkcs12 names its encoders. Modern2023's MAC is keyed by
// PKCS#12's own KDF (over SHA-256), which every Java since 8u301 reads; Modern2026's
// is PBMAC1 (PBKDF2 with HMAC-SHA-256, RFC 9579), the one FIPS 140-3 mode allows.
// Both encrypt nothing of a truststore (its certificates are public) and iterate
// within MaxIterations.
const (
	Modern2023 = "Modern2023"
	Modern2026 = "Modern2026"
)

// EncodePKCS12 returns a PKCS#12 truststore holding anchors, protected as profile
// (Modern2023 or Modern2026) says.
func EncodePKCS12(anchors []*bundle.Anchor, password, profile string) ([]byte, error) {
	enc := pkcs12.Modern2023
	switch profile {
	case Modern2023:
	case Modern2026:
		enc = pkcs12.Modern2026
	default:
		return nil, fmt.Errorf("PKCS#12 profile %q is not one of %s, %s", profile, Modern2023, Modern2026)
	}
	entries := make([]pkcs12.TrustStoreEntry, len(anchors))
	for i, a := range anchors {
		// The encoder reads the certificate's DER alone.
		entries[i] = pkcs12.TrustStoreEntry{Cert: &x509.Certificate{Raw: a.DER}, FriendlyName: Alias(a)}
	}
	return enc.EncodeTrustStoreEntries(entries, password)
}

// EncodeJKS returns a JKS truststore holding anchors. Each entry's creation time is its
// certificate's notBefore, so the same anchors and password encode to the same bytes.
func EncodeJKS(anchors []*bundle.Anchor, password string) ([]byte, error) {
	ks := keystore.New(keystore.WithOrderedAliases())
	for _, a := range anchors {
		entry := keystore.TrustedCertificateEntry{CreationTime: a.NotBefore, Certificate: keystore.Certificate{Type: "X509", Content: a.DER}}
		if err := ks.SetTrustedCertificateEntry(Alias(a), entry); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if err := ks.Store(&buf, []byte(password)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DecodePKCS12 returns the DER of every certificate a PKCS#12 truststore holds. A
// store out of bounds (MaxStoreBytes, MaxIterations), or in strict FIPS 140-3 mode one
// with SHA-1 in it (ErrFIPS), is refused unread.
func DecodePKCS12(data []byte, password string) ([][]byte, error) {
	if err := checkPKCS12(data); err != nil {
		return nil, err
	}
	certs, err := pkcs12.DecodeTrustStore(data, password)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(certs))
	for i, c := range certs {
		out[i] = c.Raw
	}
	return out, nil
}

// DecodeJKS returns the DER of every trusted certificate a JKS truststore holds. A
// store larger than MaxStoreBytes, or with a length its bytes cannot hold, is refused
// unread, and so is every store in strict FIPS 140-3 mode (ErrFIPS).
func DecodeJKS(data []byte, password string) ([][]byte, error) {
	if fipsEnforced() {
		return nil, notInFIPSMode("a JKS store's integrity check is SHA-1, which FIPS 140-3 mode does not allow: use a PKCS#12 store (PBMAC1 for FIPS Java)")
	}
	if err := checkJKS(data); err != nil {
		return nil, err
	}
	ks := keystore.New()
	if err := ks.Load(bytes.NewReader(data), []byte(password)); err != nil {
		return nil, err
	}
	var out [][]byte
	for _, alias := range ks.Aliases() {
		e, err := ks.GetTrustedCertificateEntry(alias)
		if err != nil {
			return nil, fmt.Errorf("entry %q: %w", alias, err)
		}
		out = append(out, e.Certificate.Content)
	}
	return out, nil
}
