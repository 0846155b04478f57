// Package tenancy answers one question for every place trust enters a namespace: is
// this namespace granted it? The TrustPolicies (api/v1alpha1) that select a namespace
// add up to its Grants: the bundles it may trust and the signers it may ask for
// certificates, each with the policy that grants it. Every place that decides asks
// here, so a refusal reads the same wherever it is met: `kubectl trustsync grants`
// today, and admission, the node agent, the controller and the signer once they
// enforce. It links no client: callers parse the policies they read once (Parse).
package tenancy

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
)

// Policy is one TrustPolicy, parsed: Spec is nil when its spec is invalid, and then it
// grants nothing (Err says why).
type Policy struct {
	Name string
	Spec *v1alpha1.ParsedTrustPolicySpec
	Err  error
}

// Parse parses each policy once.
func Parse(policies []*v1alpha1.TrustPolicy) []Policy {
	out := make([]Policy, 0, len(policies))
	for _, p := range policies {
		spec, err := v1alpha1.ParseTrustPolicySpec(&p.Spec)
		out = append(out, Policy{Name: p.Name, Spec: spec, Err: err})
	}
	slices.SortFunc(out, func(a, b Policy) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Grants are what one namespace is granted.
type Grants struct {
	Namespace string
	Bundles   []BundleGrant
	Signers   []SignerGrant
}

// BundleGrant is one bundle grant and the policy that makes it.
type BundleGrant struct {
	Policy string
	v1alpha1.ParsedBundleGrant
}

// SignerGrant is one signer grant and the policy that makes it.
type SignerGrant struct {
	Policy string
	v1alpha1.ParsedSignerGrant
}

// For adds up the grants of every policy selecting the namespace with these labels.
func For(policies []Policy, namespace string, nsLabels map[string]string) Grants {
	g := Grants{Namespace: namespace}
	set := labels.Set(nsLabels)
	for _, p := range policies {
		if p.Spec == nil || !p.Spec.Namespaces.Matches(set) {
			continue
		}
		for _, b := range p.Spec.Bundles {
			g.Bundles = append(g.Bundles, BundleGrant{Policy: p.Name, ParsedBundleGrant: b})
		}
		for _, s := range p.Spec.Signers {
			g.Signers = append(g.Signers, SignerGrant{Policy: p.Name, ParsedSignerGrant: s})
		}
	}
	return g
}

// Bundle is what a check knows of a bundle: its name, and its signer and labels when
// they are known (a bundle asked for by name that does not exist yet has none).
type Bundle struct {
	Name, SignerName string
	Labels           map[string]string
	// Unknown: the bundle does not exist (yet), so its labels are not known.
	Unknown bool
}

// Bundle returns the policy granting a bundle, or an error saying it is not granted.
// A bundle that does not exist yet is granted by its name, or by a grant of all its
// signer's bundles, never by a label selector: labels it does not have yet would match
// a negative selector (tier notin (restricted)) and grant what it may be labelled
// against later.
func (g Grants) Bundle(b Bundle) (string, error) {
	signer := b.SignerName
	if signer == "" {
		signer = bundle.SignerOfName(b.Name)
	}
	for _, bg := range g.Bundles {
		if b.Unknown && bg.Name == "" && (bg.Labels == nil || !bg.Labels.Empty()) {
			continue
		}
		if grantsBundle(bg.ParsedBundleGrant, b.Name, signer, b.Labels) {
			return bg.Policy, nil
		}
	}
	return "", g.refusal("trust bundle " + b.Name)
}

// Source returns nil when everything a source can select is granted: a namespace's
// own ConfigMaps and Secrets and the public roots always are; a bundle by name when
// its grant covers it (lookup says the bundle's signer and labels, when it exists);
// a signer's bundles only when one grant covers all that the selector can select (the
// grant's label requirements are among the source's), so that a bundle labelled later
// never widens what was granted.
func (g Grants) Source(src v1alpha1.Source, lookup BundleLookup) error {
	switch {
	case src.DefaultCAs, src.ConfigMap != nil, src.Secret != nil:
		return nil
	case src.Name != "":
		b := Bundle{Name: src.Name, Unknown: true}
		if lookup != nil {
			if found, ok := lookup(src.Name); ok {
				b = found
			}
		}
		_, err := g.Bundle(b)
		return err
	}
	if src.LabelSelector == nil {
		return nil // upstream's nil selector selects nothing
	}
	asked, err := metav1.LabelSelectorAsSelector(src.LabelSelector)
	if err != nil {
		return fmt.Errorf("signer %s's labelSelector: %w", src.SignerName, err)
	}
	for _, bg := range g.Bundles {
		if bg.Name == "" && bg.SignerName == src.SignerName && covers(bg.Labels, asked) {
			return nil
		}
	}
	what := "trust the bundles of signer " + src.SignerName
	if s := asked.String(); s != "" {
		what += " selected by " + s
	}
	for _, bg := range g.Bundles {
		if bg.Name == "" && bg.SignerName == src.SignerName {
			return fmt.Errorf("namespace %s may not %s: TrustPolicy %s grants only those selected by %s, and this selector may select others; narrow it (kubectl trustsync grants -n %s)", g.Namespace, what, bg.Policy, bg.Labels, g.Namespace)
		}
	}
	return g.refusal(what)
}

// Certificate returns the policy granting a certificate of signer with dnsNames, or an
// error naming the grant missing.
func (g Grants) Certificate(signer string, dnsNames []string) (string, error) {
	var narrower []string
	for _, sg := range g.Signers {
		if sg.SignerName != signer {
			continue
		}
		name, ok := allowedDNSNames(sg.DNSNames, dnsNames)
		if ok {
			return sg.Policy, nil
		}
		narrower = append(narrower, fmt.Sprintf("TrustPolicy %s allows %s but not %q", sg.Policy, describePatterns(sg.DNSNames), name))
	}
	if len(narrower) > 0 {
		return "", fmt.Errorf("namespace %s may not ask %s for DNS names %s: %s (kubectl trustsync grants -n %s)", g.Namespace, signer, strings.Join(dnsNames, ", "), strings.Join(narrower, "; "), g.Namespace)
	}
	return "", g.refusal("ask " + signer + " for certificates")
}

func (g Grants) refusal(what string) error {
	return fmt.Errorf("namespace %s may not %s: no TrustPolicy grants it; kubectl trustsync grants -n %s", g.Namespace, what, g.Namespace)
}

func describePatterns(p []string) string {
	if len(p) == 0 {
		return "no DNS name"
	}
	return strings.Join(p, ", ")
}

// covers says whether everything asked selects is selected by granted: each of the
// grant's requirements is one of the selector's own (a selector is the conjunction of
// its requirements, so it then selects a subset).
func covers(granted, asked labels.Selector) bool {
	a, _ := asked.Requirements()
	g, _ := granted.Requirements()
	for _, req := range g {
		if !slices.ContainsFunc(a, func(r labels.Requirement) bool { return r.String() == req.String() }) {
			return false
		}
	}
	return true
}
