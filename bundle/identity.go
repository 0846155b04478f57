package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
)

// AnchorID is an anchor's identity as reports, the CLI and Events give it: the
// SHA-256 of its DER, lowercase hex (64 digits).
func AnchorID(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// ID is the anchor's identity (AnchorID).
func (a *Anchor) ID() string { return hex.EncodeToString(a.Sum[:]) }

// AnchorIDs are the identities of each certificate of a PEM trust file, sorted and
// deduplicated.
func AnchorIDs(pemData []byte) ([]string, error) {
	ders, err := DecodeCertificates(pemData)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ders))
	for _, der := range ders {
		out = append(out, AnchorID(der))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
