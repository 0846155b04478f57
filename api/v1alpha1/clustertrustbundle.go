package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/bundle"
)

// ClusterTrustBundleKind is the mirror bundle's kind: the same as the native one's.
const ClusterTrustBundleKind = "ClusterTrustBundle"

// ClusterTrustBundleResource is the mirror bundles' resource (bundle.Mirror's).
var ClusterTrustBundleResource = GroupVersion.WithResource(bundle.Resource)

// ClusterTrustBundle is the mirror of certificates.k8s.io's ClusterTrustBundle,
// served where the native API is not (a cluster of an older version, a managed
// cluster with the feature off): the same spec, names in the mirror form
// (bundle.MirrorName). trustsync reads and writes both kinds as the native type
// (bundle/bundleapi converts), so upstream's rules apply to it unchanged
// (bundle.Validate with bundle.MirrorForm); this type declares its shape, which the
// CRD's schema must match.
type ClusterTrustBundle struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ClusterTrustBundleSpec `json:"spec"`
}

// ClusterTrustBundleSpec is upstream's ClusterTrustBundleSpec.
type ClusterTrustBundleSpec struct {
	// SignerName is the signer the anchors belong to; immutable.
	SignerName string `json:"signerName,omitempty"`
	// TrustBundle is PEM CA certificates, at most 1 MiB.
	TrustBundle string `json:"trustBundle"`
}
