// Package v1alpha1 is trustsync's API, group trustsync.io, version v1alpha1, declared
// once: every kind (TrustTarget, FederatedTrustDomain, NodeTrustReport, TrustPolicy
// and the mirror ClusterTrustBundle), the sources list that TrustTargets and the
// trustsync.io/sources annotation share, the labels and annotations trustsync leaves
// on what it writes, every condition reason, and for each kind with a spec one
// Parse<Kind>Spec that checks what the CRD's schema cannot and returns typed values
// (go-spiffe's trust domains, IDs and bundles; label selectors), so that the
// controller, the plugin and admission parse a spec one way, once.
//
// The CRDs in charts/trustsync/files/crds are written by hand (they carry CEL rules that
// say what Go cannot); crd_test.go fails when a field of these types is missing from
// its CRD's schema or the reverse.
//
// It links no client: every binary, the sidecar included, may import it.
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
)

// GroupVersion is trustsync.io/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "trustsync.io", Version: "v1alpha1"}

// ConditionReady is the one condition every kind with a status reports: whether the
// object's work is done (a target written everywhere, a peer's bundle imported, a
// policy's references resolved).
const ConditionReady = "Ready"

// Reasons shared by several kinds.
const (
	// ReasonInvalidSpec: the spec says something Parse<Kind>Spec refuses; the
	// message names the field.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonConflict: another writer holds what the object would write.
	ReasonConflict = "Conflict"
)

// FromStore decodes what an informer's store of unstructured objects of one kind holds,
// skipping (and logging at level 2) what does not decode: a reader acts on every object
// it can read, and one bad object must not hide the rest.
func FromStore[T any](items []any, decode func(*unstructured.Unstructured) (T, error)) []T {
	var out []T
	for _, obj := range items {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		t, err := decode(u)
		if err != nil {
			klog.V(2).InfoS("Skipping an object that does not decode: it is not acted on", "kind", u.GetKind(), "name", u.GetName(), "err", err)
			continue
		}
		out = append(out, t)
	}
	return out
}

// A certificate request (CSR or PodCertificateRequest) the signer cannot issue now
// through no fault of its own waits: a CSR carries ConditionWaiting (True with the
// reason while it waits, False with ReasonIssued once issued), and both kinds get a
// Warning Event with the reason.
const (
	ConditionWaiting = "Waiting"
	// ReasonKeyUnavailable: the keeper of the signer's CA key (its PKCS#11 token or
	// KMS) cannot sign; nothing is signed, with that key or another, until it can.
	ReasonKeyUnavailable = "KeyUnavailable"
	// ReasonIssued: the request waited and has been issued.
	ReasonIssued = "Issued"
)
