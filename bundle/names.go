package bundle

import (
	"fmt"
	"strings"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Form says which naming scheme a bundle object follows.
type Form int

const (
	// NativeForm is certificates.k8s.io's: "<signer with / as :>:<suffix>".
	NativeForm Form = iota
	// MirrorForm is the trustsync.io CRD's. Custom resource names must be DNS-1123
	// subdomains and cannot hold ":", so "--" plays its role.
	MirrorForm
)

// separator returns what joins the signer-derived prefix to the rest of a name.
func (f Form) separator() string {
	if f == MirrorForm {
		return "--"
	}
	return ":"
}

func (f Form) String() string {
	if f == MirrorForm {
		return "mirror"
	}
	return "native"
}

// NamePrefix returns the prefix every name of a bundle for signerName must carry in
// the given form: "example.com/s" gives "example.com:s:" natively and
// "example.com--s--" in the mirror.
func NamePrefix(signerName string, form Form) string {
	sep := form.separator()
	return strings.ReplaceAll(signerName, "/", sep) + sep
}

// MirrorName maps a bundle name in upstream form to the mirror object's name. The
// mapping is a plain substitution and always safe in this direction.
func MirrorName(upstreamName string) string {
	return strings.ReplaceAll(upstreamName, ":", "--")
}

// UpstreamName maps a mirror object's name back to upstream form. The reverse of
// MirrorName is ambiguous on its own (signer names may contain "--", as in "xn--"
// labels), so it is derived from the object's signerName; a name that does not carry
// its signer's prefix is returned unchanged.
func UpstreamName(mirrorName, signerName string) string {
	if signerName == "" {
		return mirrorName
	}
	prefix := NamePrefix(signerName, MirrorForm)
	if !strings.HasPrefix(mirrorName, prefix) {
		return mirrorName
	}
	return NamePrefix(signerName, NativeForm) + strings.TrimPrefix(mirrorName, prefix)
}

// NameValidator returns the metadata.name rule for a bundle of signerName, in the
// shape apimachinery's ValidateObjectMeta takes. The native form is upstream's rule
// to the letter; the mirror form is the same rule with "--" in place of ":".
func NameValidator(signerName string, form Form) apimachineryvalidation.ValidateNameFunc {
	sep := form.separator()
	return func(name string, prefix bool) []string {
		if signerName == "" {
			if strings.Contains(name, sep) {
				return []string{fmt.Sprintf("ClusterTrustBundle without signer name must not have %q in its name", sep)}
			}
			return apimachineryvalidation.NameIsDNSSubdomain(name, prefix)
		}
		required := NamePrefix(signerName, form)
		if !strings.HasPrefix(name, required) {
			return []string{fmt.Sprintf("ClusterTrustBundle for signerName %s must be named with prefix %s", signerName, required)}
		}
		suffix := strings.TrimPrefix(name, required)
		// Natively the DNS-1123 check below already refuses ":" in the suffix; "--"
		// is valid DNS, so the mirror needs the rule spelled out.
		if form == MirrorForm && strings.Contains(suffix, sep) {
			return []string{fmt.Sprintf("ClusterTrustBundle for signerName %s must not have %q in its name after the prefix %s", signerName, sep, required)}
		}
		if form == MirrorForm {
			if other, ok := otherSignerClaiming(name, signerName); ok {
				return []string{fmt.Sprintf("mirror name %s also begins with %s, the mirror prefix of signer %s, whose attesters could then take it: mirror names must belong to one signer only; use, for the mirror, a signer name that no other reading of %q as \"/\" turns into another valid signer (no %q in its path, nor in a domain label but the first), or the native API", name, NamePrefix(other, MirrorForm), other, sep, sep)}
			}
		}
		return apimachineryvalidation.NameIsDNSSubdomain(suffix, prefix)
	}
}

// otherSignerClaiming returns a valid signer name other than signerName that could
// also own the mirror object name, if there is one. The mirror writes "/" and ":" as
// "--", which signer names may hold themselves: "a.com--b--c--live" is the bundle
// "live" of signer a.com/b--c and equally of signer a.com--b/c, so whoever may attest
// for one could create the object the other needs. Since a suffix holds no "--", the
// owner's prefix ends at the name's last "--"; the name is ambiguous when what comes
// before it reads as another valid signer with "/" in place of some other "--".
func otherSignerClaiming(name, signerName string) (string, bool) {
	head := name[:max(strings.LastIndex(name, "--"), 0)]
	for j := strings.Index(head, "--"); j >= 0; {
		candidate := head[:j] + "/" + head[j+2:]
		if candidate != signerName && len(ValidateSignerName(field.NewPath("signerName"), candidate)) == 0 {
			return candidate, true
		}
		next := strings.Index(head[j+2:], "--")
		if next < 0 {
			break
		}
		j += 2 + next
	}
	return "", false
}

// ValidateSignerName applies the rules the API server applies to a signerName on
// CertificateSigningRequests and ClusterTrustBundles, with its messages: exactly one
// "/", a domain of DNS-1123 labels with at least two of them, a path of DNS-1123
// subdomains separated by dots, and length limits on both.
func ValidateSignerName(fldPath *field.Path, signerName string) field.ErrorList {
	if signerName == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	segments := strings.Split(signerName, "/")
	if len(segments) != 2 {
		// Without exactly one "/", nothing after it can be judged meaningfully.
		return field.ErrorList{field.Invalid(fldPath, signerName, "must be a fully qualified domain and path of the form 'example.com/signer-name'")}
	}
	domain, path := segments[0], segments[1]

	var errs field.ErrorList
	if len(domain) > validation.DNS1123SubdomainMaxLength {
		errs = append(errs, field.TooLong(fldPath, "", validation.DNS1123SubdomainMaxLength))
	}
	domainLabels := strings.Split(domain, ".")
	errs = append(errs, firstLabelErrors(fldPath, domain, domainLabels, validation.IsDNS1123Label)...)
	if len(domainLabels) < 2 {
		errs = append(errs, field.Invalid(fldPath, domain, "should be a domain with at least two segments separated by dots"))
	}
	errs = append(errs, firstLabelErrors(fldPath, path, strings.Split(path, "."), validation.IsDNS1123Subdomain)...)

	maxPath := validation.DNS1123SubdomainMaxLength + validation.DNS1123LabelMaxLength + 1
	if maxSigner := validation.DNS1123SubdomainMaxLength + maxPath + 1; len(signerName) > maxSigner {
		errs = append(errs, field.TooLong(fldPath, "", maxSigner))
	}
	return errs
}

// firstLabelErrors reports the first label of segment that check refuses, with every
// message check gives for it. Like the API server, it stops there: later labels'
// errors would repeat the same complaint without telling the user anything new.
func firstLabelErrors(fldPath *field.Path, segment string, labels []string, check func(string) []string) field.ErrorList {
	for _, label := range labels {
		msgs := check(label)
		if len(msgs) == 0 {
			continue
		}
		var errs field.ErrorList
		for _, msg := range msgs {
			errs = append(errs, field.Invalid(fldPath, segment, fmt.Sprintf("validating label %q: %s", label, msg)))
		}
		return errs
	}
	return nil
}
