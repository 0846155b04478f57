package tenancy

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// MaxUnresolved is how many unresolved grants a TrustPolicy's status names.
const MaxUnresolved = 10

// Status is what a TrustPolicy's status says of it, given every namespace's labels and
// every bundle there is: how many namespaces it selects, and the bundle grants that
// refer to nothing that exists now (granted all the same: what they name may come
// later). A policy whose spec is invalid selects nothing and resolves nothing.
func Status(p Policy, namespaces []map[string]string, bundles []Bundle) (selected int, unresolved []string) {
	if p.Spec == nil {
		return 0, nil
	}
	for _, ns := range namespaces {
		if p.Spec.Namespaces.Matches(labels.Set(ns)) {
			selected++
		}
	}
	for i, g := range p.Spec.Bundles {
		if !resolves(g, bundles) && len(unresolved) < MaxUnresolved {
			unresolved = append(unresolved, describeGrant(i, g))
		}
	}
	return selected, unresolved
}

func resolves(g v1alpha1.ParsedBundleGrant, bundles []Bundle) bool {
	for _, b := range bundles {
		if grantsBundle(g, b.Name, b.SignerName, b.Labels) {
			return true
		}
	}
	return false
}

// describeGrant names a grant and what it found missing, as status.unresolved says it.
func describeGrant(i int, g v1alpha1.ParsedBundleGrant) string {
	switch {
	case g.Name != "":
		return fmt.Sprintf("bundles[%d]: bundle %s does not exist", i, g.Name)
	case !g.TrustDomain.IsZero():
		return fmt.Sprintf("bundles[%d]: trust domain %s is not federated (no bundle of %s labelled %s=%s)", i, g.TrustDomain, v1alpha1.FederatedSignerName, v1alpha1.TrustDomainLabel, g.TrustDomain)
	case g.Labels.Empty():
		return fmt.Sprintf("bundles[%d]: signer %s has no bundle", i, g.SignerName)
	}
	return fmt.Sprintf("bundles[%d]: signer %s has no bundle selected by %s", i, g.SignerName, g.Labels)
}
