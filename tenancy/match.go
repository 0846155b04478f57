package tenancy

import (
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// MatchDNSName says whether a requested DNS name is one pattern allows: as many
// labels, each equal (in any case) or matched by a "*" label, which stands for one
// whole, non-empty label, never several, never part of one, and never a requested "*"
// (a wildcard certificate would cover every name the pattern allows one at a time).
// It is the one rule for every DNS pattern trustsync checks: TrustPolicy grants, and
// the signer's policy file's approval patterns (after "{namespace}" is filled in).
func MatchDNSName(pattern, name string) bool {
	pl, nl := strings.Split(strings.ToLower(pattern), "."), strings.Split(strings.ToLower(name), ".")
	if len(pl) != len(nl) {
		return false
	}
	for i := range pl {
		if nl[i] == "" || nl[i] == "*" || (pl[i] != "*" && pl[i] != nl[i]) {
			return false
		}
	}
	return true
}

// allowedDNSNames says whether every name is allowed by one of patterns, and if not,
// the first that is not.
func allowedDNSNames(patterns, names []string) (string, bool) {
	for _, n := range names {
		ok := false
		for _, p := range patterns {
			if MatchDNSName(p, n) {
				ok = true
				break
			}
		}
		if !ok {
			return n, false
		}
	}
	return "", true
}

// grantsBundle says whether grant g covers a bundle named name, of signer signerName
// with labels: by its name, or as one of its signer's bundles its selector picks.
func grantsBundle(g v1alpha1.ParsedBundleGrant, name, signerName string, bundleLabels map[string]string) bool {
	if g.Name != "" {
		return g.Name == name
	}
	return g.SignerName == signerName && g.Labels.Matches(labels.Set(bundleLabels))
}
