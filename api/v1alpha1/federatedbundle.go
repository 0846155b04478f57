package v1alpha1

import (
	"bytes"
	"crypto/fips140"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trustsync/trustsync/bundle"
)

// ParseSPIFFEBundle reads a trust domain's bundle given as a SPIFFE bundle (JWKS, as an
// endpoint serves it) or as PEM certificates (as a ClusterTrustBundle holds them), and
// checks that it can be imported (CheckFederatedBundle).
func ParseSPIFFEBundle(td spiffeid.TrustDomain, data []byte) (*spiffebundle.Bundle, error) {
	var b *spiffebundle.Bundle
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '{' {
		var err error
		if b, err = ParseSPIFFEBundleJSON(td, trimmed); err != nil {
			return nil, err
		}
	} else {
		certs, err := bundle.ParseCertificates(data)
		if err == nil && len(certs) == 0 {
			err = errors.New("no CERTIFICATE block found")
		}
		if err != nil {
			return nil, fmt.Errorf("neither a SPIFFE bundle (JSON) nor PEM certificates: %w", err)
		}
		b = spiffebundle.FromX509Authorities(td, certs)
	}
	return b, CheckFederatedBundle(b)
}

// ParseSPIFFEBundleJSON is go-spiffe's spiffebundle.Parse, where SHA-1 may check a
// certificate's thumbprint. A SPIFFE bundle is a JWK set, and go-jose, which reads it,
// checks each key's x5t (the SHA-1 of its certificate: an identifier, not what the
// key is trusted by) against the certificate. Strict FIPS 140-3 mode
// (GODEBUG=fips140=only) refuses SHA-1 for any use and would refuse every bundle; the
// bypass covers the parsing and nothing else. Every reader of a SPIFFE bundle's JSON
// goes through here.
func ParseSPIFFEBundleJSON(td spiffeid.TrustDomain, data []byte) (b *spiffebundle.Bundle, err error) {
	fips140.WithoutEnforcement(func() { b, err = spiffebundle.Parse(td, data) })
	return b, err
}

// MaxFederatedAnchors is the most X.509 authorities an import holds: the status lists each
// (its CRD's anchors maxItems), and a status that cannot say what is imported would
// leave the last one standing while pods trust something else.
const MaxFederatedAnchors = 1024

// MinRSABits is the smallest RSA key an imported authority may have: below it a
// signature can be forged (and Go's verifier refuses under 1024 bits outright).
const MinRSABits = 2048

// CheckFederatedBundle refuses a bundle that cannot become a ClusterTrustBundle holding the domain's
// X.509 authorities: none at all (an import never empties what pods trust), more than
// the status can describe, an authority with a breakable RSA key, or PEM that the API
// server would refuse (too large, not CA certificates).
func CheckFederatedBundle(b *spiffebundle.Bundle) error {
	authorities := b.X509Authorities()
	if len(authorities) == 0 {
		return errors.New("the bundle holds no X.509 authority (x509-svid key); an empty bundle is never imported")
	}
	if len(authorities) > MaxFederatedAnchors {
		return fmt.Errorf("the bundle holds %d X.509 authorities; at most %d are imported (the status names each)", len(authorities), MaxFederatedAnchors)
	}
	for _, a := range authorities {
		if k, ok := a.PublicKey.(*rsa.PublicKey); ok && k.N.BitLen() < MinRSABits {
			return fmt.Errorf("authority %s (%s) has a %d-bit RSA key; at least %d bits are imported", bundle.AnchorID(a.Raw), a.Subject, k.N.BitLen(), MinRSABits)
		}
	}
	pem := BundlePEM(b)
	if errs := bundle.ValidateTrustBundle(field.NewPath("x509Authorities"), pem); len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
}

// BundlePEM is the bundle's X.509 authorities as a ClusterTrustBundle's trustBundle holds
// them: deduplicated and in a stable order, so an unchanged bundle is an unchanged
// object.
func BundlePEM(b *spiffebundle.Bundle) string {
	pool := bundle.NewPool()
	for _, c := range b.X509Authorities() {
		pool.AddDER(c.Raw)
	}
	return string(pool.PEM())
}

// BundleAnchors are the ids (SHA-256 of the DER) of the bundle's X.509 authorities, sorted.
func BundleAnchors(b *spiffebundle.Bundle) []string { return AnchorIDsOf(b.X509Authorities()) }

// AnchorIDsOf are the certificates' ids, sorted and without repeats.
func AnchorIDsOf(certs []*x509.Certificate) []string {
	ids := make([]string, 0, len(certs))
	for _, c := range certs {
		ids = append(ids, bundle.AnchorID(c.Raw))
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// ExpiredAuthorities are the authorities of b no longer valid at now: imported all the same (the
// peer publishes them, and a pod verifying an old signature may need them), but said.
func ExpiredAuthorities(b *spiffebundle.Bundle, now time.Time) []*x509.Certificate {
	var out []*x509.Certificate
	for _, a := range b.X509Authorities() {
		if now.After(a.NotAfter) {
			out = append(out, a)
		}
	}
	return out
}
