package injector

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/contract"
)

// checkNode refuses, naming the annotation and why, what delivery node cannot do: the
// sidecar's own settings, signalling a container (the agent is not in the pod's
// process namespace), and a cluster without the agent's CSIDriver.
func checkNode(a map[string]string, cfg Config) field.ErrorList {
	var errs field.ErrorList
	invalid := func(key, msg string) {
		errs = append(errs, field.Invalid(annotationPath(key), a[key], "with "+AnnotationDelivery+": node, "+msg))
	}
	for _, key := range sidecarOnly {
		if _, set := a[key]; set {
			invalid(key, "there is no sidecar for it to configure; remove it")
		}
	}
	for _, key := range []string{AnnotationReloadSignal, AnnotationReloadContainer} {
		if _, set := a[key]; set {
			invalid(key, fmt.Sprintf("the node agent cannot signal a container (it is not in the pod's process namespace); use %s, which the agent calls at the pod's address, or %s: sidecar", AnnotationReloadURL, AnnotationDelivery))
		}
	}
	if !cfg.NodeAgent {
		invalid(AnnotationDelivery, fmt.Sprintf("the node agent's CSIDriver %s is not installed (the chart installs it unless agent.enabled is false); use %s: sidecar", contract.CSIDriverName, AnnotationDelivery))
	}
	return errs
}

// buildNode gives the pod the node agent's inline CSI volume, its attributes the same
// Spec the sidecar's flags carry, and the same mounts and environment as the sidecar
// would; no container.
func buildNode(pod *corev1.Pod, req *request, targets []target, cfg Config) ([]PatchOp, []string) {
	var warnings []string
	volume := newNamer(pod).volume("trustsync-anchors")
	p := &patch{}
	addStatus(p, pod, v1alpha1.InjectionStatus{Delivery: v1alpha1.DeliveryNode, Volume: volume, MountPath: req.mountPath})
	if req.certificate != nil && !runsAs(pod, targets, appUID(pod, targets)) {
		warnings = append(warnings, fmt.Sprintf("trustsync: neither the pod nor container %q sets runAsUser, so the node agent writes %s (mode 0600) owned by root, which an app running as another uid cannot read; set securityContext.runAsUser (and runAsGroup) to the app's ids", targets[0].c.Name, v1alpha1.FileKey))
	}
	if r := req.reload; r != nil && r.URL != "" {
		warnings = append(warnings, fmt.Sprintf("trustsync: with %s: node the agent POSTs the reload to the pod's own address, at the port and path of %s, not to its loopback: the app must listen there", AnnotationDelivery, r.URL))
	}
	attrs := contractSpec(req, cfg).Attributes()
	appendItems(p, "/spec/volumes", pod.Spec.Volumes != nil, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: contract.CSIDriverName, ReadOnly: ptr.To(true), VolumeAttributes: attrs,
	}}})
	for _, t := range targets {
		mountInto(p, t, req, volume)
	}
	return p.ops, warnings
}
