package webhook

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	kwhmodel "github.com/slok/kubewebhook/v2/pkg/model"
	kwhvalidating "github.com/slok/kubewebhook/v2/pkg/webhook/validating"
	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/policy"
)

const routeBundles = "/validate/clustertrustbundles"

// bundleAdmission validates ClusterTrustBundles of both kinds. The mirror gets every
// upstream rule and the attest check, since nothing else guards it; the native kind,
// which the API server already validates, gets only what trustsync adds: expiry
// warnings and, when policy asks, refusal of expired anchors.
type bundleAdmission struct {
	bundles policy.Bundles
	authz   Authorizer
	clock   clock.PassiveClock
	metrics *Metrics
}

func (a *bundleAdmission) Validate(ctx context.Context, ar *kwhmodel.AdmissionReview, _ metav1.Object) (*kwhvalidating.ValidatorResult, error) {
	logger := reviewLogger(ar)
	mirror := ar.RequestGVK != nil && ar.RequestGVK.Group == bundle.Mirror.GroupVersion.Group
	form, gk := bundle.NativeForm, schema.GroupKind{Group: bundle.NativeV1.GroupVersion.Group, Kind: "ClusterTrustBundle"}
	if mirror {
		form, gk.Group = bundle.MirrorForm, bundle.Mirror.GroupVersion.Group
	}

	newU, newB, err := decodeBundle(ar.NewObjectRaw)
	if err != nil {
		return nil, err
	}
	var oldU *unstructured.Unstructured
	var oldB *certificatesv1.ClusterTrustBundle
	if ar.Operation == kwhmodel.OperationUpdate {
		if oldU, oldB, err = decodeBundle(ar.OldObjectRaw); err != nil {
			return nil, err
		}
	}

	if mirror {
		var errs field.ErrorList
		if oldB == nil {
			errs = bundle.Validate(newB, form)
		} else {
			errs = bundle.ValidateUpdate(newB, oldB, form)
		}
		if len(errs) > 0 {
			logger.V(2).Info("Denied invalid ClusterTrustBundle", "errors", errs.ToAggregate().Error())
			return a.deny(apierrors.NewInvalid(gk, newB.Name, errs).Error()), nil
		}
		// As upstream: validation first, then the attest check, which updates that touch
		// only garbage-collection fields skip.
		if newB.Spec.SignerName != "" && !onlyGCFieldsChanged(newU, oldU) {
			if msg := a.attest(ctx, logger, ar, newB); msg != "" {
				return a.deny(msg), nil
			}
		}
	}

	trustBundleChanged := oldB == nil || oldB.Spec.TrustBundle != newB.Spec.TrustBundle
	warnings, expiredErrs := a.expiry(newB)
	if a.bundles.DenyExpired && trustBundleChanged && len(expiredErrs) > 0 {
		return a.deny(apierrors.NewInvalid(gk, newB.Name, expiredErrs).Error()), nil
	}
	if len(warnings) > 0 {
		a.metrics.outcome(routeBundles, outcomeWarned)
		return &kwhvalidating.ValidatorResult{Valid: true, Warnings: warnings}, nil
	}
	a.metrics.outcome(routeBundles, outcomeAllowed)
	return &kwhvalidating.ValidatorResult{Valid: true}, nil
}

func (a *bundleAdmission) deny(msg string) *kwhvalidating.ValidatorResult {
	a.metrics.outcome(routeBundles, outcomeDenied)
	return &kwhvalidating.ValidatorResult{Valid: false, Message: msg}
}

// attest returns upstream's Forbidden message when the requesting user may not attest
// for the bundle's signer, or "" when they may.
func (a *bundleAdmission) attest(ctx context.Context, logger klog.Logger, ar *kwhmodel.AdmissionReview, b *certificatesv1.ClusterTrustBundle) string {
	allowed, err := mayAttest(ctx, a.authz, ar.UserInfo, b.Spec.SignerName)
	switch {
	case err != nil && !allowed:
		a.metrics.attest.WithLabelValues("error").Inc()
		logger.Error(err, "Attest check failed; denying, as the API server does on authorizer errors", "signerName", b.Spec.SignerName)
	case allowed:
		a.metrics.attest.WithLabelValues("allowed").Inc()
		return ""
	default:
		a.metrics.attest.WithLabelValues("denied").Inc()
		logger.V(2).Info("User may not attest for signer", "signerName", b.Spec.SignerName)
	}
	gr := schema.GroupResource{Group: bundle.Mirror.GroupVersion.Group, Resource: bundle.Resource}
	return apierrors.NewForbidden(gr, b.Name, fmt.Errorf("user not permitted to attest for signerName %q", b.Spec.SignerName)).Error()
}

// expiry returns a warning for every anchor expired or expiring within the policy's
// window, and a field error for every expired one (used when policy refuses them).
func (a *bundleAdmission) expiry(b *certificatesv1.ClusterTrustBundle) ([]string, field.ErrorList) {
	certs, err := bundle.ParseCertificates([]byte(b.Spec.TrustBundle))
	if err != nil {
		// Only the native kind gets here unvalidated, and the API server has already
		// refused anything that does not parse.
		return nil, nil
	}
	now := a.clock.Now()
	window := time.Duration(a.bundles.WarningDays()) * 24 * time.Hour
	var warnings []string
	var expired field.ErrorList
	for i, cert := range certs {
		switch left := cert.NotAfter.Sub(now); {
		case left <= 0:
			warnings = append(warnings, fmt.Sprintf("trust anchor %d (%s) expired on %s", i, describe(cert), cert.NotAfter.UTC().Format(time.RFC3339)))
			expired = append(expired, field.Invalid(field.NewPath("spec", "trustBundle"), "<value omitted>",
				fmt.Sprintf("entry %d (%s) expired on %s, and policy (bundles.denyExpired) refuses expired anchors", i, describe(cert), cert.NotAfter.UTC().Format(time.RFC3339))))
		case left <= window:
			warnings = append(warnings, fmt.Sprintf("trust anchor %d (%s) expires on %s, in %d days", i, describe(cert), cert.NotAfter.UTC().Format(time.RFC3339), int(left.Hours()/24)))
		}
	}
	return warnings, expired
}

func describe(cert *x509.Certificate) string {
	if s := cert.Subject.String(); s != "" {
		return s
	}
	return "serial " + cert.SerialNumber.String()
}

func decodeBundle(raw []byte) (*unstructured.Unstructured, *certificatesv1.ClusterTrustBundle, error) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return nil, nil, fmt.Errorf("failed to decode ClusterTrustBundle from the admission review: %w", err)
	}
	b := &certificatesv1.ClusterTrustBundle{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b); err != nil {
		return nil, nil, fmt.Errorf("failed to decode ClusterTrustBundle %q: %w", u.GetName(), err)
	}
	return u, b, nil
}

// reviewLogger returns a logger carrying what identifies one admission review.
func reviewLogger(ar *kwhmodel.AdmissionReview) klog.Logger {
	return klog.LoggerWithValues(klog.Background(), "uid", ar.ID, "operation", ar.Operation, "name", ar.Name, "namespace", ar.Namespace, "user", ar.UserInfo.Username)
}
