package query

import (
	"slices"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/tenancy"
)

// Ungranted are the anchors of anchors that the namespace is no longer granted: some
// bundle holds each, and no bundle the namespace is granted does. An anchor no bundle
// holds came from elsewhere (the namespace's own ConfigMap, the public roots) and is
// never flagged.
func (c Cluster) Ungranted(namespace string, anchors []string) []string {
	return c.ungranted(c.holdersOfAnchors(), namespace, anchors)
}

// holdersOfAnchors maps each anchor to the bundles holding it, each bundle parsed
// once for a whole answer; nil where there are no grants to compare.
func (c Cluster) holdersOfAnchors() map[string][]*certificatesv1.ClusterTrustBundle {
	if c.Grants == nil {
		return nil
	}
	out := map[string][]*certificatesv1.ClusterTrustBundle{}
	for _, b := range c.Bundles {
		ids, _ := bundle.AnchorIDs([]byte(b.Spec.TrustBundle))
		for _, id := range ids {
			out[id] = append(out[id], b)
		}
	}
	return out
}

func (c Cluster) ungranted(holders map[string][]*certificatesv1.ClusterTrustBundle, namespace string, anchors []string) []string {
	g, ok := c.Grants[namespace]
	if !ok {
		return nil
	}
	var out []string
	for _, a := range anchors {
		bundles := holders[a]
		granted := slices.ContainsFunc(bundles, func(b *certificatesv1.ClusterTrustBundle) bool {
			_, err := g.Bundle(tenancy.Bundle{Name: b.Name, SignerName: b.Spec.SignerName, Labels: b.Labels})
			return err == nil
		})
		if len(bundles) > 0 && !granted {
			out = append(out, a)
		}
	}
	return out
}

// grantedAny says whether namespace is granted one of bundles: always without
// grants, or for an exempt namespace.
func (c Cluster) grantedAny(namespace string, bundles []*certificatesv1.ClusterTrustBundle) bool {
	g, ok := c.Grants[namespace]
	if !ok {
		return true
	}
	return slices.ContainsFunc(bundles, func(b *certificatesv1.ClusterTrustBundle) bool {
		_, err := g.Bundle(tenancy.Bundle{Name: b.Name, SignerName: b.Spec.SignerName, Labels: b.Labels})
		return err == nil
	})
}
