package webhook

import (
	"context"
	"errors"
	"fmt"

	kwhmodel "github.com/slok/kubewebhook/v2/pkg/model"

	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/tenancy"
)

const routeMutatePods = "/mutate/pods"

// NamespaceAnnotations returns a namespace's annotations (its trustsync defaults).
type NamespaceAnnotations func(ctx context.Context, namespace string) (map[string]string, error)

// podAdmission serves /mutate/pods. It implements kubewebhook's Webhook itself rather
// than a Mutator, for two reasons: a mutator cannot refuse (kubewebhook answers
// allowed for every mutating review), and its patch is a diff of a re-marshalled
// object, where the injector builds an add-only patch that never touches fields this
// build does not know.
type podAdmission struct {
	cfg        injector.Config
	namespaces NamespaceAnnotations
	nativeAPIs func() injector.NativeAPIs
	nodeAgent  func() bool
	grants     tenancy.Lookup // nil: tenancy not enforced
	bundles    tenancy.BundleLookup
	metrics    *Metrics
}

func (a *podAdmission) ID() string                 { return routeMutatePods }
func (a *podAdmission) Kind() kwhmodel.WebhookKind { return kwhmodel.WebhookKindMutating }

func (a *podAdmission) Review(ctx context.Context, ar kwhmodel.AdmissionReview) (kwhmodel.AdmissionResponse, error) {
	logger := reviewLogger(&ar)
	if ar.Operation != kwhmodel.OperationCreate {
		return a.skip(ar, "not a create"), nil
	}
	pod, err := injector.DecodePod(ar.NewObjectRaw)
	if err != nil {
		return nil, err
	}
	var warnings []string
	nsAnnotations, err := a.namespaces(ctx, ar.Namespace)
	if err != nil {
		// Injecting without the namespace's defaults beats refusing a pod that asked
		// for trust; the warning tells its author.
		logger.Error(err, "Cannot read namespace defaults; injecting without them")
		warnings = append(warnings, fmt.Sprintf("trustsync could not read namespace %q's default annotations (%v); only the pod's own were used", ar.Namespace, err))
	}

	cfg := a.cfg
	if a.nativeAPIs != nil {
		cfg.NativeAPIs = a.nativeAPIs()
	}
	if a.nodeAgent != nil {
		cfg.NodeAgent = a.nodeAgent()
	}
	res, err := injector.Inject(pod, ar.Namespace, nsAnnotations, cfg)
	if a.grants != nil && err == nil {
		// Checked on what Inject parsed, and on the volumes written by hand, before
		// anything is answered.
		if denied := a.checkGrants(ctx, ar, append(res.Asks, injector.VolumeAsks(pod)...)); denied != nil {
			return denied, nil
		}
	}
	var refusal *injector.RefusalError
	switch {
	case errors.As(err, &refusal):
		a.metrics.injections.WithLabelValues(outcomeDenied, "").Inc()
		a.metrics.outcome(routeMutatePods, outcomeDenied)
		logger.V(2).Info("Refused pod", "reason", refusal.Error())
		return &kwhmodel.ValidatingAdmissionResponse{ID: ar.ID, Allowed: false, Message: refusal.Error(), Warnings: warnings}, nil
	case err != nil:
		return nil, err
	case res.Skipped != "":
		return a.skip(ar, res.Skipped), nil
	}
	patch, err := res.JSON()
	if err != nil {
		return nil, err
	}
	warnings = append(warnings, res.Warnings...)
	a.metrics.injections.WithLabelValues(outcomeInjected, "").Inc()
	a.metrics.outcome(routeMutatePods, outcomeInjected)
	logger.V(2).Info("Injected pod")
	return &kwhmodel.MutatingAdmissionResponse{ID: ar.ID, JSONPatchPatch: patch, Warnings: warnings}, nil
}

// checkGrants refuses a pod that asks, any way it can, for trust its namespace is not
// granted: nil when every ask is granted (or nothing is asked, or the namespace is
// exempt). Where the grants cannot be told, the pod is refused too: enforcement that
// lets pods through when it cannot look is no enforcement.
func (a *podAdmission) checkGrants(ctx context.Context, ar kwhmodel.AdmissionReview, asks []tenancy.Ask) kwhmodel.AdmissionResponse {
	if len(asks) == 0 {
		return nil
	}
	g, exempt, err := a.grants(ctx, ar.Namespace)
	switch {
	case err != nil:
		err = fmt.Errorf("cannot tell what namespace %s is granted: %w", ar.Namespace, err)
	case exempt:
		return nil
	default:
		if err = g.Check(asks, a.bundles); err == nil {
			return nil
		}
	}
	a.metrics.injections.WithLabelValues(outcomeDenied, "").Inc()
	a.metrics.outcome(routeMutatePods, outcomeDenied)
	reviewLogger(&ar).V(2).Info("Refused pod: not granted", "reason", err.Error())
	return &kwhmodel.ValidatingAdmissionResponse{ID: ar.ID, Allowed: false, Message: "trustsync: " + err.Error()}
}

func (a *podAdmission) skip(ar kwhmodel.AdmissionReview, reason string) kwhmodel.AdmissionResponse {
	a.metrics.injections.WithLabelValues(outcomeSkipped, reason).Inc()
	a.metrics.outcome(routeMutatePods, outcomeSkipped)
	// An empty patch, not none: kubewebhook always sets patchType, and the API server
	// refuses a patchType without a patch. Reinvocation (IfNeeded) reaches this path
	// whenever another plugin changed an injected pod.
	return &kwhmodel.MutatingAdmissionResponse{ID: ar.ID, JSONPatchPatch: []byte("[]")}
}
