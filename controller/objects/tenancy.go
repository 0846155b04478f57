package objects

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/tenancy"
)

// Tenancy is what the controller enforces of the TrustPolicies: a TrustTarget writes
// only into namespaces granted every one of its sources, and an annotated object gets
// only the sources its namespace is granted. The zero value enforces nothing.
type Tenancy struct {
	Grants  tenancy.Lookup
	Bundles tenancy.BundleLookup
}

// maxRefusalsNamed is how many sources not granted one message names.
const maxRefusalsNamed = 5

// Split parts sources into those namespace is granted and the refusal of the rest
// (nil when every one is granted, or tenancy is not enforced). Where the grants
// cannot be told, err says so: nothing is written then, and nothing taken away.
func (t Tenancy) Split(ctx context.Context, namespace string, sources []v1alpha1.Source) (granted []v1alpha1.Source, refused, err error) {
	if t.Grants == nil || namespace == "" {
		return sources, nil, nil
	}
	g, exempt, err := t.Grants(ctx, namespace)
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("cannot tell what namespace %s is granted: %w", namespace, err)
	case exempt:
		return sources, nil, nil
	}
	var errs []string
	notGranted := 0
	for _, s := range sources {
		if err := g.Source(s, t.Bundles); err != nil {
			// The sources are a tenant's annotation: the message names a few.
			if notGranted++; notGranted <= maxRefusalsNamed {
				errs = append(errs, fmt.Sprintf("%s (%s)", s.Path, err))
			}
			continue
		}
		granted = append(granted, s)
	}
	if notGranted > maxRefusalsNamed {
		errs = append(errs, fmt.Sprintf("and %d more", notGranted-maxRefusalsNamed))
	}
	if len(errs) > 0 {
		refused = errors.New(strings.Join(errs, "; "))
	}
	return granted, refused, nil
}
