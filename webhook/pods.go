package webhook

import (
	"context"
	"errors"
	"fmt"

	kwhmodel "github.com/slok/kubewebhook/v2/pkg/model"

	"github.com/trustsync/trustsync/injector"
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

func (a *podAdmission) skip(ar kwhmodel.AdmissionReview, reason string) kwhmodel.AdmissionResponse {
	a.metrics.injections.WithLabelValues(outcomeSkipped, reason).Inc()
	a.metrics.outcome(routeMutatePods, outcomeSkipped)
	// An empty patch, not none: kubewebhook always sets patchType, and the API server
	// refuses a patchType without a patch. Reinvocation (IfNeeded) reaches this path
	// whenever another plugin changed an injected pod.
	return &kwhmodel.MutatingAdmissionResponse{ID: ar.ID, JSONPatchPatch: []byte("[]")}
}
