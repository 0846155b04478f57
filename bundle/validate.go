package bundle

import (
	certificatesv1 "k8s.io/api/certificates/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	signerNamePath  = field.NewPath("spec", "signerName")
	trustBundlePath = field.NewPath("spec", "trustBundle")
)

// Validate applies the API server's create-time rules to a bundle whose name is in
// the given form: object metadata with the bundle name rule, the signerName when
// set, then spec.trustBundle. It accepts signers under the reserved kubernetes.io
// domain, as upstream does; the attest check is what guards them.
func Validate(b *certificatesv1.ClusterTrustBundle, form Form) field.ErrorList {
	return validate(b, form, true)
}

// ValidateUpdate applies the API server's update rules: those of Validate, except
// that an unchanged trustBundle is not parsed again (so a change in Go's PEM or X.509
// parsing never strands a stored object), plus metadata update rules and the
// immutability of spec.signerName.
func ValidateUpdate(newBundle, oldBundle *certificatesv1.ClusterTrustBundle, form Form) field.ErrorList {
	parse := newBundle.Spec.TrustBundle != oldBundle.Spec.TrustBundle
	errs := validate(newBundle, form, parse)
	errs = append(errs, apimachineryvalidation.ValidateObjectMetaUpdate(&newBundle.ObjectMeta, &oldBundle.ObjectMeta, field.NewPath("metadata"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(newBundle.Spec.SignerName, oldBundle.Spec.SignerName, signerNamePath)...)
	return errs
}

func validate(b *certificatesv1.ClusterTrustBundle, form Form, parseTrustBundle bool) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&b.ObjectMeta, false, NameValidator(b.Spec.SignerName, form), field.NewPath("metadata"))
	if b.Spec.SignerName != "" {
		errs = append(errs, ValidateSignerName(signerNamePath, b.Spec.SignerName)...)
	}
	if parseTrustBundle {
		errs = append(errs, ValidateTrustBundle(trustBundlePath, b.Spec.TrustBundle)...)
	}
	return errs
}
