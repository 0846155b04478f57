package tenancy

import (
	"context"
	"fmt"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// Ask is one thing a pod (or an object) asks of trustsync that a grant must cover:
// the bundles a source selects, or certificates of a signer.
type Ask struct {
	// Where says where it is asked, for the message: "annotation
	// trustsync.io/sources", "volume roots (projected clusterTrustBundle)".
	Where string
	// Source asks for the bundles it selects.
	Source *v1alpha1.Source
	// Signer asks for certificates of a signer, for DNSNames (none for a
	// podCertificate volume: the signer sets its names).
	Signer   string
	DNSNames []string
}

// Lookup says what a namespace is granted, or that it is exempt (trustsync's own
// namespace, never checked); an error where that cannot be told yet. Every place
// that enforces asks through one (tenancy/grantcache's Cache.For).
type Lookup func(ctx context.Context, namespace string) (g Grants, exempt bool, err error)

// BundleLookup says what a bundle asked for by name is (its signer and labels), when
// it exists; a grant of a signer's bundles by label covers it only then.
type BundleLookup func(name string) (Bundle, bool)

// Check returns nil when the grants cover every ask, or an error naming the first
// that is not covered, where it was asked, and how to see the grants. lookup says a
// bundle's signer and labels by name, where known (nil: by its name alone).
func (g Grants) Check(asks []Ask, lookup BundleLookup) error {
	for _, a := range asks {
		var err error
		switch {
		case a.Source != nil:
			err = g.Source(*a.Source, lookup)
		case a.Signer != "":
			_, err = g.Certificate(a.Signer, a.DNSNames)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", a.Where, err)
		}
	}
	return nil
}
