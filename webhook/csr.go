package webhook

import (
	"context"
	"fmt"
	"time"

	kwhmodel "github.com/slok/kubewebhook/v2/pkg/model"
	kwhmutating "github.com/slok/kubewebhook/v2/pkg/webhook/mutating"
	kwhvalidating "github.com/slok/kubewebhook/v2/pkg/webhook/validating"
	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/policy"
)

const (
	routeValidateCSR = "/validate/certificatesigningrequests"
	routeMutateCSR   = "/mutate/certificatesigningrequests"
)

var csrGroupKind = schema.GroupKind{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}

// csrAdmission applies the policy's per-signer duration rules. The mutating route
// fills in the default and clamps; the validating route refuses what the rules refuse.
// Signers without a rule are left alone (the webhook configurations' matchConditions
// keep them from being sent here at all).
type csrAdmission struct {
	policy  *policy.Policy
	metrics *Metrics
}

// decision reads a CSR's requested duration and what its signer's rules make of it.
// ok is false when no rule applies.
func (a *csrAdmission) decision(csr *certificatesv1.CertificateSigningRequest) (s *policy.Signer, req policy.Request, dec policy.Decision, ok bool, err error) {
	s, ok = a.policy.Signer(csr.Spec.SignerName)
	if !ok {
		return nil, policy.Request{}, policy.Decision{}, false, nil
	}
	req, err = policy.RequestedDuration(csr.Annotations, csr.Spec.ExpirationSeconds)
	if err != nil {
		return s, req, dec, true, err
	}
	return s, req, s.Decide(req), true, nil
}

// Validate refuses a CSR whose duration the rules refuse, with the API server's
// Invalid message shape, on the field that asked.
func (a *csrAdmission) Validate(_ context.Context, _ *kwhmodel.AdmissionReview, obj metav1.Object) (*kwhvalidating.ValidatorResult, error) {
	csr, err := decodeCSR(obj)
	if err != nil {
		return nil, err
	}
	s, req, dec, ok, err := a.decision(csr)
	switch {
	case !ok:
		a.metrics.outcome(routeValidateCSR, outcomeSkipped)
		return &kwhvalidating.ValidatorResult{Valid: true}, nil
	case err != nil:
		return a.deny(csr, field.Invalid(annotationPath(), csr.Annotations[policy.DurationAnnotation], err.Error())), nil
	case dec.Refusal != "":
		return a.deny(csr, field.Invalid(durationPath(req), durationValue(req, csr), dec.Refusal)), nil
	case dec.Clamped:
		// Under Clamp the mutating route has already shortened the request; seeing it
		// here means that route did not run, and the maximum must still hold.
		return a.deny(csr, field.Invalid(durationPath(req), durationValue(req, csr), fmt.Sprintf(
			"requested duration %s exceeds the maximum %s that policy sets for signer %q, and trustsync's mutating webhook did not clamp it; check that its MutatingWebhookConfiguration is installed",
			req.Duration, time.Duration(s.MaxExpirationSeconds)*time.Second, s.SignerName))), nil
	}
	a.metrics.outcome(routeValidateCSR, outcomeAllowed)
	return &kwhvalidating.ValidatorResult{Valid: true}, nil
}

func (a *csrAdmission) deny(csr *certificatesv1.CertificateSigningRequest, err *field.Error) *kwhvalidating.ValidatorResult {
	a.metrics.outcome(routeValidateCSR, outcomeDenied)
	msg := apierrors.NewInvalid(csrGroupKind, csr.Name, field.ErrorList{err}).Error()
	klog.V(2).InfoS("Denied CertificateSigningRequest", "name", csr.Name, "signerName", csr.Spec.SignerName, "user", csr.Spec.Username, "reason", msg)
	return &kwhvalidating.ValidatorResult{Valid: false, Message: msg}
}

// Mutate sets spec.expirationSeconds to the signer's default when the request names no
// duration, and to the maximum when it asks for more under Clamp, dropping
// cert-manager's duration annotation then so the two never disagree. It changes
// nothing else: the object is unstructured, so fields the compiled types do not know
// survive the patch.
func (a *csrAdmission) Mutate(_ context.Context, _ *kwhmodel.AdmissionReview, obj metav1.Object) (*kwhmutating.MutatorResult, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("expected an unstructured CertificateSigningRequest, got %T", obj)
	}
	csr, err := decodeCSR(u)
	if err != nil {
		return nil, err
	}
	s, req, dec, ok, err := a.decision(csr)
	if !ok || err != nil || dec.Refusal != "" {
		// Refusals belong to the validating route, which runs after this one.
		a.metrics.outcome(routeMutateCSR, outcomeSkipped)
		return &kwhmutating.MutatorResult{}, nil
	}
	if req.Set {
		a.metrics.requested.WithLabelValues(s.SignerName).Inc()
	}
	switch {
	case !req.Set:
		if err := unstructured.SetNestedField(u.Object, int64(dec.Lifetime/time.Second), "spec", "expirationSeconds"); err != nil {
			return nil, err
		}
		a.metrics.outcome(routeMutateCSR, outcomeDefaulted)
		return &kwhmutating.MutatorResult{MutatedObject: u}, nil
	case dec.Clamped:
		if err := unstructured.SetNestedField(u.Object, s.MaxExpirationSeconds, "spec", "expirationSeconds"); err != nil {
			return nil, err
		}
		if req.FromAnnotation {
			annotations := u.GetAnnotations()
			delete(annotations, policy.DurationAnnotation)
			u.SetAnnotations(annotations)
		}
		a.metrics.outcome(routeMutateCSR, outcomeClamped)
		warning := fmt.Sprintf("requested duration %s exceeds the maximum that policy sets for signer %q; spec.expirationSeconds set to %d (%s)",
			req.Duration, s.SignerName, s.MaxExpirationSeconds, dec.Lifetime)
		return &kwhmutating.MutatorResult{MutatedObject: u, Warnings: []string{warning}}, nil
	}
	a.metrics.honored.WithLabelValues(s.SignerName).Inc()
	a.metrics.outcome(routeMutateCSR, outcomeAllowed)
	return &kwhmutating.MutatorResult{}, nil
}

func decodeCSR(obj metav1.Object) (*certificatesv1.CertificateSigningRequest, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("expected an unstructured CertificateSigningRequest, got %T", obj)
	}
	csr := &certificatesv1.CertificateSigningRequest{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, csr); err != nil {
		return nil, fmt.Errorf("failed to decode CertificateSigningRequest %q: %w", u.GetName(), err)
	}
	return csr, nil
}

func annotationPath() *field.Path {
	return field.NewPath("metadata", "annotations").Key(policy.DurationAnnotation)
}

// durationPath names the field a request's duration came from.
func durationPath(req policy.Request) *field.Path {
	if req.FromAnnotation {
		return annotationPath()
	}
	return field.NewPath("spec", "expirationSeconds")
}

func durationValue(req policy.Request, csr *certificatesv1.CertificateSigningRequest) any {
	if req.FromAnnotation {
		return csr.Annotations[policy.DurationAnnotation]
	}
	return *csr.Spec.ExpirationSeconds
}
