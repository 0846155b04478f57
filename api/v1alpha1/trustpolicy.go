package v1alpha1

import (
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trustsync/trustsync/bundle"
)

// TrustPolicy's kind and resource.
const TrustPolicyKind = "TrustPolicy"

var TrustPolicyResource = GroupVersion.WithResource("trustpolicies")

// TrustPolicy grants the namespaces it selects the bundles they may trust and the
// signers they may ask for certificates. It is cluster-scoped: a platform team writes
// policies, tenants read what they are granted. Grants add up over every policy that
// selects a namespace; nothing is taken away by a policy. Where the chart's
// tenancy.enforced is on, trust enters a namespace only as granted (admission, the
// node agent, the controller and the signer check it); a namespace's own ConfigMap and
// Secret sources and the public roots are always allowed.
type TrustPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              TrustPolicySpec   `json:"spec"`
	Status            TrustPolicyStatus `json:"status,omitempty"`
}

// TrustPolicySpec is who is granted, and what.
type TrustPolicySpec struct {
	// NamespaceSelector picks the namespaces granted to; {} picks every namespace.
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector"`
	// Bundles are what the namespaces may trust.
	Bundles []BundleGrant `json:"bundles,omitempty"`
	// Signers are what the namespaces may ask certificates of.
	Signers []SignerGrant `json:"signers,omitempty"`
}

// BundleGrant grants bundles in one of three ways.
type BundleGrant struct {
	// Name grants one bundle by its name (upstream form).
	Name string `json:"name,omitempty"`
	// SignerName grants a signer's bundles: all of them, or those LabelSelector
	// selects.
	SignerName    string                `json:"signerName,omitempty"`
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
	// TrustDomain grants a federated peer's imported anchors (the bundle of signer
	// trustsync.io/federated labelled trustsync.io/trust-domain with it).
	TrustDomain string `json:"trustDomain,omitempty"`
}

// SignerGrant grants certificates of one signer.
type SignerGrant struct {
	SignerName string `json:"signerName"`
	// DNSNames are the DNS names a certificate may carry: exact names, or patterns in
	// which `*` stands for exactly one DNS label ("*.payments.svc"). Empty: only
	// certificates without DNS names (the workload's SPIFFE ID alone).
	DNSNames []string `json:"dnsNames,omitempty"`
}

// TrustPolicyStatus says what the policy reaches now.
type TrustPolicyStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	// Namespaces is how many namespaces the selector picks now.
	Namespaces int `json:"namespaces"`
	// Unresolved names the grants that refer to nothing that exists now (a bundle,
	// a signer with no bundle, a trust domain not federated), at most ten: granted
	// all the same, since what they name may come later.
	Unresolved []string `json:"unresolved,omitempty"`
}

// The reasons of a TrustPolicy's Ready condition (with ReasonInvalidSpec), and of the
// refusals enforcement gives.
const (
	// ReasonResolved: every grant refers to something that exists.
	ReasonResolved = "Resolved"
	// ReasonUnresolved: some grant refers to nothing yet (status.unresolved).
	ReasonUnresolved = "Unresolved"
	// ReasonNotGranted: trust or a certificate was refused because no TrustPolicy
	// grants it to the namespace.
	ReasonNotGranted = "NotGranted"
)

// ParsedTrustPolicySpec is a TrustPolicy's spec as enforcement uses it.
type ParsedTrustPolicySpec struct {
	Namespaces labels.Selector
	Bundles    []ParsedBundleGrant
	Signers    []ParsedSignerGrant
}

// ParsedBundleGrant is one bundle grant: a bundle by Name, or a signer's bundles that
// Labels select (a trust domain's grant is trustsync.io/federated's bundle labelled
// with it, and TrustDomain says so).
type ParsedBundleGrant struct {
	Name        string
	SignerName  string
	Labels      labels.Selector
	TrustDomain spiffeid.TrustDomain
}

// ParsedSignerGrant is one signer grant.
type ParsedSignerGrant struct {
	SignerName string
	DNSNames   []string
}

// ParseTrustPolicySpec checks a TrustPolicy's spec (a namespace selector; each bundle
// grant exactly one of name, signerName and trustDomain, each valid as upstream or
// go-spiffe says; each signer grant a signer name and DNS name patterns) and returns
// its typed values; the error is a field.ErrorList's aggregate, naming each offending
// field and value.
func ParseTrustPolicySpec(s *TrustPolicySpec) (*ParsedTrustPolicySpec, error) {
	var errs field.ErrorList
	p := field.NewPath("spec")
	parsed := &ParsedTrustPolicySpec{}
	if s.NamespaceSelector == nil {
		errs = append(errs, field.Required(p.Child("namespaceSelector"), "name the namespaces granted to ({} for every namespace)"))
	} else {
		sel, err := metav1.LabelSelectorAsSelector(s.NamespaceSelector)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("namespaceSelector"), s.NamespaceSelector, err.Error()))
		}
		parsed.Namespaces = sel
	}
	if len(s.Bundles) == 0 && len(s.Signers) == 0 {
		errs = append(errs, field.Required(p, "grant at least one bundle or signer"))
	}
	for i, g := range s.Bundles {
		pg, gerrs := parseBundleGrant(g, p.Child("bundles").Index(i))
		errs = append(errs, gerrs...)
		parsed.Bundles = append(parsed.Bundles, pg)
	}
	for i, g := range s.Signers {
		fp := p.Child("signers").Index(i)
		errs = append(errs, bundle.ValidateSignerName(fp.Child("signerName"), g.SignerName)...)
		for j, pattern := range g.DNSNames {
			if err := validateDNSPattern(pattern); err != nil {
				errs = append(errs, field.Invalid(fp.Child("dnsNames").Index(j), pattern, err.Error()))
			}
		}
		parsed.Signers = append(parsed.Signers, ParsedSignerGrant(g))
	}
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return parsed, nil
}

func parseBundleGrant(g BundleGrant, fp *field.Path) (ParsedBundleGrant, field.ErrorList) {
	var kinds []string
	for _, k := range []struct {
		name string
		set  bool
	}{{"name", g.Name != ""}, {"signerName", g.SignerName != ""}, {"trustDomain", g.TrustDomain != ""}} {
		if k.set {
			kinds = append(kinds, k.name)
		}
	}
	switch {
	case len(kinds) != 1:
		return ParsedBundleGrant{}, field.ErrorList{field.Invalid(fp, strings.Join(kinds, ", "), "give exactly one of name, signerName and trustDomain")}
	case g.LabelSelector != nil && g.SignerName == "":
		return ParsedBundleGrant{}, field.ErrorList{field.Invalid(fp.Child("labelSelector"), "", "labelSelector goes with signerName only")}
	case g.Name != "":
		return ParsedBundleGrant{Name: g.Name}, bundle.Selector{Name: g.Name}.Validate(fp)
	case g.TrustDomain != "":
		td, err := spiffeid.TrustDomainFromString(g.TrustDomain)
		if err != nil || td.String() != g.TrustDomain {
			return ParsedBundleGrant{}, field.ErrorList{field.Invalid(fp.Child("trustDomain"), g.TrustDomain, "must be a SPIFFE trust domain such as partner.example, written alone")}
		}
		return ParsedBundleGrant{SignerName: FederatedSignerName, TrustDomain: td,
			Labels: labels.SelectorFromSet(labels.Set{TrustDomainLabel: g.TrustDomain})}, nil
	}
	errs := bundle.ValidateSignerName(fp.Child("signerName"), g.SignerName)
	sel := labels.Everything()
	if g.LabelSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(g.LabelSelector, metav1validation.LabelSelectorValidationOptions{}, fp.Child("labelSelector"))...)
		if s, err := metav1.LabelSelectorAsSelector(g.LabelSelector); err == nil {
			sel = s
		}
	}
	return ParsedBundleGrant{SignerName: g.SignerName, Labels: sel}, errs
}

// validateDNSPattern accepts a DNS name whose labels may each be "*".
func validateDNSPattern(pattern string) error {
	if len(pattern) > 253 {
		return fmt.Errorf("has %d characters; a DNS name has at most 253", len(pattern))
	}
	for _, label := range strings.Split(pattern, ".") {
		if label == "*" {
			continue
		}
		if msgs := validation.IsDNS1123Label(label); len(msgs) > 0 {
			return fmt.Errorf("label %q: %s ('*' stands for one whole label, as in *.payments.svc)", label, strings.Join(msgs, "; "))
		}
	}
	return nil
}

// TrustPolicyFromUnstructured decodes a TrustPolicy read through a dynamic client.
func TrustPolicyFromUnstructured(u *unstructured.Unstructured) (*TrustPolicy, error) {
	return fromUnstructured[TrustPolicy](u, TrustPolicyKind+" %s")
}
