package bundle

import (
	"fmt"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxLabelSelectorLength is the kubelet's limit on a projection's selector, measured
// on its string form.
const MaxLabelSelectorLength = 100 * 1024

// Selector names the bundles one source takes, as a clusterTrustBundle projection
// does: either one bundle by Name, or every bundle of SignerName whose labels match
// LabelSelector.
type Selector struct {
	// Name is a bundle name in upstream form ("example.com:signer:live"), whichever
	// API serves the bundle.
	Name string `json:"name,omitempty"`
	// SignerName selects the bundles of one signer; it must match exactly.
	SignerName string `json:"signerName,omitempty"`
	// LabelSelector narrows SignerName's bundles. Upstream's rule: nil matches
	// nothing, an empty selector matches every bundle of the signer.
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
}

// Validate applies the kubelet's projection rules: exactly one of name and
// signerName, a valid bundle name or signer name, a selector only with signerName.
func (s Selector) Validate(fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case s.Name != "" && s.SignerName != "":
		errs = append(errs, field.Invalid(fldPath, s.Name, "only one of name and signerName may be used"))
	case s.Name != "":
		for _, msg := range NameValidator(SignerOfName(s.Name), NativeForm)(s.Name, false) {
			errs = append(errs, field.Invalid(fldPath.Child("name"), s.Name, "not a valid clustertrustbundlename: "+msg))
		}
		if s.LabelSelector != nil {
			errs = append(errs, field.Invalid(fldPath.Child("labelSelector"), s.LabelSelector, "labelSelector must be unset if name is specified"))
		}
	case s.SignerName != "":
		errs = append(errs, ValidateSignerName(fldPath.Child("signerName"), s.SignerName)...)
		errs = append(errs, metav1validation.ValidateLabelSelector(s.LabelSelector, metav1validation.LabelSelectorValidationOptions{}, fldPath.Child("labelSelector"))...)
		if sel, err := metav1.LabelSelectorAsSelector(s.LabelSelector); err == nil && len(sel.String()) > MaxLabelSelectorLength {
			errs = append(errs, field.TooLong(fldPath.Child("labelSelector"), "", MaxLabelSelectorLength))
		}
	default:
		errs = append(errs, field.Required(fldPath, "either name or signerName must be specified"))
	}
	return errs
}

// SignerOfName returns the signer an upstream-form name claims by its prefix, or ""
// for a name without ":". It is what the kubelet checks a projection's name against.
func SignerOfName(name string) string {
	i := strings.LastIndex(name, ":")
	if i < 0 {
		return ""
	}
	return strings.ReplaceAll(name[:i], ":", "/")
}

// Matcher returns a predicate that reports whether a bundle (named in upstream form)
// is selected. The selector is parsed once here, not per bundle.
func (s Selector) Matcher() (func(*certificatesv1.ClusterTrustBundle) bool, error) {
	if s.Name != "" {
		return func(b *certificatesv1.ClusterTrustBundle) bool { return b.Name == s.Name }, nil
	}
	sel, err := s.labelSelector()
	if err != nil {
		return nil, err
	}
	return func(b *certificatesv1.ClusterTrustBundle) bool {
		return b.Spec.SignerName == s.SignerName && sel.Matches(labels.Set(b.Labels))
	}, nil
}

// labelSelector parses LabelSelector with upstream's nil-matches-nothing rule.
func (s Selector) labelSelector() (labels.Selector, error) {
	sel, err := metav1.LabelSelectorAsSelector(s.LabelSelector)
	if err != nil {
		return nil, fmt.Errorf("invalid labelSelector for signerName %q: %w", s.SignerName, err)
	}
	if n := len(sel.String()); n > MaxLabelSelectorLength {
		return nil, fmt.Errorf("labelSelector for signerName %q is %d bytes long, more than the %d allowed", s.SignerName, n, MaxLabelSelectorLength)
	}
	return sel, nil
}

// ListOptions returns the server-side selectors that narrow a list or watch to what s
// can match, so a reader receives only what it needs. Name selection uses a field
// selector on metadata.name with the name in the form of the API being read. ok is
// false when s can match nothing (a signerName with a nil selector): there is then
// nothing to list, and listing with an empty selector would return everything.
func (s Selector) ListOptions(form Form) (opts metav1.ListOptions, ok bool, err error) {
	if s.Name != "" {
		name := s.Name
		if form == MirrorForm {
			name = MirrorName(name)
		}
		return metav1.ListOptions{FieldSelector: "metadata.name=" + name}, true, nil
	}
	if s.LabelSelector == nil {
		return metav1.ListOptions{}, false, nil
	}
	sel, err := s.labelSelector()
	if err != nil {
		return metav1.ListOptions{}, false, err
	}
	return metav1.ListOptions{
		FieldSelector: "spec.signerName=" + s.SignerName,
		LabelSelector: sel.String(),
	}, true, nil
}
