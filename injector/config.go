// Package injector decides what a pod that asks for trust gets: the trust-sync
// sidecar, a shared memory-backed volume, read-only mounts and environment. It is a
// pure function of the pod, its namespace's annotations and the injector's
// configuration; the webhook only decodes reviews, calls Inject and encodes the patch.
package injector

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/policy"
)

// Config is the injector's cluster-wide configuration.
type Config struct {
	// Image holds /trustsync-sidecar.
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// ImagePullSecrets name the Secrets (in the pod's namespace) the kubelet pulls
	// Image with, where trustsync's registry needs credentials. A sidecar pod gets
	// those it does not list already; its own stay first, and a missing Secret only
	// makes the kubelet try the pull without it.
	ImagePullSecrets []string
	// DefaultMode applies when a pod does not say; empty means v1alpha1.ModeRestartableInit.
	DefaultMode v1alpha1.Mode
	// Namespace is the injector's own; its pods are never touched, so trustsync can
	// never block its own recovery.
	Namespace string
	// Policy gives the trust domain of a requested certificate's signer.
	Policy *policy.Policy
	// NativeAPIs are the native APIs the API server serves: delivery native needs them.
	NativeAPIs NativeAPIs
	// NodeAgent says the node agent's CSIDriver (csi.trustsync.io) is installed:
	// delivery node needs it.
	NodeAgent bool
}

// SystemNamespaces are never injected.
var SystemNamespaces = sets.New("kube-system", "kube-public", "kube-node-lease")

// NamespaceSkipped says why pods of namespace are never injected (SkipSystemNamespace,
// SkipOwnNamespace), or "" when they may be: the one rule, for the injector and for
// what is set up in the namespaces it serves.
func (c Config) NamespaceSkipped(namespace string) string {
	switch {
	case SystemNamespaces.Has(namespace):
		return SkipSystemNamespace
	case namespace == c.Namespace:
		return SkipOwnNamespace
	}
	return ""
}

// DefaultImage is the sidecar image when none is configured.
const DefaultImage = "ghcr.io/trustsync/trustsync:v0.1.0"

func (c Config) defaultMode() v1alpha1.Mode {
	if c.DefaultMode == "" {
		return v1alpha1.ModeRestartableInit
	}
	return c.DefaultMode
}

func (c Config) image() string {
	if c.Image == "" {
		return DefaultImage
	}
	return c.Image
}

func (c Config) pullPolicy() corev1.PullPolicy {
	if c.ImagePullPolicy == "" {
		return corev1.PullIfNotPresent
	}
	return c.ImagePullPolicy
}

// trustDomain returns the SPIFFE trust domain of signer: its policy entry's, else the
// default.
func (c Config) trustDomain(signer string) string {
	if c.Policy != nil {
		if s, ok := c.Policy.Signer(signer); ok {
			return s.TrustDomain
		}
	}
	return policy.DefaultTrustDomain
}

// expiryWarningDays is how soon before an anchor expires the sidecar warns: the
// policy's window, the webhook's for admission warnings.
func (c Config) expiryWarningDays() int {
	if c.Policy != nil {
		return c.Policy.Bundles.WarningDays()
	}
	return contract.DefaultExpiryWarningDays
}
