package signer

import (
	"context"
	"fmt"

	"github.com/trustsync/trustsync/tenancy"
)

// notGranted is why a namespace may not have a certificate of signer for dnsNames,
// "" when it may (or tenancy is not enforced); an error where the grants cannot be
// told, to be tried again rather than decided.
func notGranted(ctx context.Context, grants tenancy.Lookup, namespace, signer string, dnsNames []string) (string, error) {
	if grants == nil {
		return "", nil
	}
	g, exempt, err := grants(ctx, namespace)
	if err != nil {
		return "", fmt.Errorf("cannot tell what namespace %s is granted: %w", namespace, err)
	}
	if exempt {
		return "", nil
	}
	if _, err := g.Certificate(signer, dnsNames); err != nil {
		return err.Error(), nil
	}
	return "", nil
}
