package v1alpha1

// What the injector records on a pod and every reader of pods reads back: how its
// trust is delivered, and where.

const (
	// AnnotationInject: "true" on a pod (or on a ConfigMap, Secret or object with
	// caBundle fields) asks trustsync to deliver the trust its other trustsync.io/
	// annotations name.
	AnnotationInject = "trustsync.io/inject"
	// AnnotationStatus, on a pod, is the injector's InjectionStatus as JSON.
	AnnotationStatus = "trustsync.io/status"
)

// Delivery is how the files reach the pod.
type Delivery string

const (
	// DeliverySidecar runs the trust-sync sidecar: every source kind, merged files,
	// updates within seconds, certificates through CSRs.
	DeliverySidecar Delivery = "sidecar"
	// DeliveryNative turns the same annotations into Kubernetes' own projected volume
	// (clusterTrustBundle and podCertificate sources): no sidecar, what the kubelet
	// can do alone.
	DeliveryNative Delivery = "native"
	// DeliveryNode has the trustsync agent on the pod's node (a CSI driver) write the
	// files into an inline CSI volume: everything the sidecar delivers, with no
	// container in the pod and no watch of its own for bundles.
	DeliveryNode Delivery = "node"
	// DeliveryConfigMap and DeliverySecret are a trust object's keys (a TrustTarget's
	// ConfigMap or Secret) as the kubelet writes them into a pod's configMap, secret
	// or projected volume: observed and reported like trustsync's own deliveries,
	// never injected.
	DeliveryConfigMap Delivery = "configMap"
	DeliverySecret    Delivery = "secret"
)

// Mode is how the sidecar runs (trustsync.io/sidecar-mode). Its value "native" names
// Kubernetes' native sidecar; in code it is ModeRestartableInit, so that "native" in
// an identifier means one thing only: delivery native, the kubelet's projection.
type Mode string

const (
	// ModeRestartableInit runs the sidecar as Kubernetes' native sidecar: an init
	// container with restartPolicy Always, started (and probed) before every other
	// container. Its annotation value is "native".
	ModeRestartableInit Mode = "native"
	// ModeLegacy, for clusters without native sidecars: an init container writes the
	// files once, then a regular container keeps them current.
	ModeLegacy Mode = "legacy"
)

// InjectionStatus is recorded in the trustsync.io/status annotation: what was
// injected, so that a second admission (reinvocation, or a stored pod sent again)
// changes nothing, and so that readers of pods find the trust files.
type InjectionStatus struct {
	// Delivery is empty for the sidecar (as before delivery existed), "native" for
	// native volumes and "node" for the node agent's volume, which have no sidecar.
	Delivery  Delivery `json:"delivery,omitempty"`
	Mode      Mode     `json:"mode,omitempty"`
	Sidecar   string   `json:"sidecar,omitempty"`
	Volume    string   `json:"volume"`
	MountPath string   `json:"mountPath"`
}
