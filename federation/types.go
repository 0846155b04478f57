// Package federation is the FederatedTrustDomain API (trustsync.io/v1alpha1,
// cluster-scoped), shaped like spire-controller-manager's ClusterFederatedTrustDomain
// so SPIRE users recognise it: a peer trust domain, the SPIFFE bundle endpoint that
// serves its bundle, how that endpoint is authenticated, and the bundle to start from.
// It also names what both sides agree on: where a signer serves a trust domain's
// bundle, the SPIFFE ID its endpoint presents, and the ClusterTrustBundle an imported
// domain's anchors are written to. It links no controller: kubectl trustsync prints
// FederatedTrustDomains with it, controller/federation keeps them, the signer serves.
package federation

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trustsync/trustsync/bundle"
)

// Resource is the FederatedTrustDomains' resource.
var Resource = schema.GroupVersionResource{Group: "trustsync.io", Version: "v1alpha1", Resource: "federatedtrustdomains"}

// Kind is their kind.
const Kind = "FederatedTrustDomain"

// SignerName is the signer of every imported bundle: pods select a peer's anchors by
// it and the trust-domain label, and only trustsync-controller may attest for it.
const SignerName = "trustsync.io/federated"

// TrustDomainLabel, on an imported bundle, names the peer trust domain it holds.
const TrustDomainLabel = "trustsync.io/trust-domain"

// EndpointPath is the path of the SPIFFE ID a trustsync signer's bundle endpoint
// presents for a trust domain: spiffe://TD/trustsync/bundle-endpoint.
const EndpointPath = "/trustsync/bundle-endpoint"

// Profiles of a bundle endpoint, as the SPIFFE Trust Domain and Bundle spec names them.
const (
	ProfileSPIFFE = "https_spiffe"
	ProfileWeb    = "https_web"
)

// Ready is the condition that says whether the peer's bundle was fetched and written;
// its reasons when not (the last good anchors are kept in every case).
const (
	Ready                               = "Ready"
	ReasonEndpointUnreachable           = "EndpointUnreachable"
	ReasonEndpointUnauthenticated       = "EndpointUnauthenticated"
	ReasonSequenceRegressed             = "SequenceRegressed"
	ReasonInvalidBundle                 = "InvalidBundle"
	ReasonInvalidSpec                   = "InvalidSpec"
	ReasonConflict                      = "Conflict"
	ReasonRefreshed                     = "Refreshed"
	ReasonBootstrapped                  = "Bootstrapped"
	ReasonBundleWriteFailed             = "BundleWriteFailed"
	maxTrustDomainLength                = 63
	maxEndpointURLLength                = 2048
	maxBootstrapBundleLength      int64 = 1 << 20
)

// FederatedTrustDomain imports a peer trust domain's bundle from its endpoint.
type FederatedTrustDomain struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitempty"`
}

// Spec is the peer and how to reach it.
type Spec struct {
	// TrustDomain is the peer's SPIFFE trust domain, such as b.example.
	TrustDomain string `json:"trustDomain"`
	// BundleEndpointURL serves the peer's bundle (https only).
	BundleEndpointURL string `json:"bundleEndpointURL"`
	// BundleEndpointProfile says how the endpoint is authenticated.
	BundleEndpointProfile Profile `json:"bundleEndpointProfile"`
	// TrustDomainBundle is the bundle to start from: PEM certificates or a SPIFFE
	// bundle (JWKS). https_spiffe needs it to authenticate the first fetch.
	TrustDomainBundle string `json:"trustDomainBundle,omitempty"`
}

// Profile is a bundle endpoint profile.
type Profile struct {
	// Type is https_spiffe or https_web.
	Type string `json:"type"`
	// EndpointSPIFFEID is the SPIFFE ID the endpoint must present (https_spiffe).
	EndpointSPIFFEID string `json:"endpointSPIFFEID,omitempty"`
}

// Status says whether the peer's bundle arrived, and where it stands in this cluster.
type Status struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	// Sequence is the spiffe_sequence of the bundle held.
	Sequence *uint64 `json:"sequence,omitempty"`
	// LastRefreshed is when the endpoint last answered with a bundle accepted (or one
	// equal to what is held).
	LastRefreshed *metav1.Time `json:"lastRefreshed,omitempty"`
	// Anchors are the SHA-256 ids of the X.509 authorities held, sorted.
	Anchors []string `json:"anchors,omitempty"`
	// Bundle is the ClusterTrustBundle the anchors are written to.
	Bundle string `json:"bundle,omitempty"`
	// Pods says how many pods of this cluster select the imported bundle and how many
	// of them hold every one of its anchors, from the nodes' reports; absent where no
	// reports are served.
	Pods *PodsHolding `json:"pods,omitempty"`
}

// PodsHolding counts the pods selecting the imported bundle that hold all its anchors.
type PodsHolding struct {
	Holding  int `json:"holding"`
	Expected int `json:"expected"`
}

// EndpointID is the SPIFFE ID a trustsync bundle endpoint presents for td.
func EndpointID(td string) string { return "spiffe://" + td + EndpointPath }

// BundleName is the imported bundle's name for td, in upstream form.
func BundleName(td string) string {
	return bundle.NamePrefix(SignerName, bundle.NativeForm) + td
}

// Validate checks a spec; the CRD's schema checks the shape, this what it means.
func (s Spec) Validate() field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	td, err := spiffeid.TrustDomainFromString(s.TrustDomain)
	switch {
	case err != nil:
		errs = append(errs, field.Invalid(p.Child("trustDomain"), s.TrustDomain, "must be a SPIFFE trust domain such as b.example (lowercase letters, digits, '.', '-'): "+err.Error()))
	case td.String() != s.TrustDomain:
		errs = append(errs, field.Invalid(p.Child("trustDomain"), s.TrustDomain, "write the trust domain alone, without scheme or path: "+td.String()))
	case len(s.TrustDomain) > maxTrustDomainLength:
		errs = append(errs, field.TooLong(p.Child("trustDomain"), s.TrustDomain, maxTrustDomainLength))
	case strings.Contains(s.TrustDomain, "_") || strings.Contains(s.TrustDomain, "--"):
		errs = append(errs, field.Invalid(p.Child("trustDomain"), s.TrustDomain, "may not contain '_' or '--': the imported bundle is named and labelled after it"))
	}
	u, err := url.Parse(s.BundleEndpointURL)
	switch {
	case len(s.BundleEndpointURL) > maxEndpointURLLength:
		errs = append(errs, field.TooLong(p.Child("bundleEndpointURL"), "", maxEndpointURLLength))
	case err != nil || u.Scheme != "https" || u.Host == "":
		errs = append(errs, field.Invalid(p.Child("bundleEndpointURL"), s.BundleEndpointURL, "must be an https URL, such as https://signer.b.example:8443/b.example"))
	}
	prof := p.Child("bundleEndpointProfile")
	switch s.BundleEndpointProfile.Type {
	case ProfileSPIFFE:
		id, err := spiffeid.FromString(s.BundleEndpointProfile.EndpointSPIFFEID)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(prof.Child("endpointSPIFFEID"), s.BundleEndpointProfile.EndpointSPIFFEID, "must be a SPIFFE ID, such as "+EndpointID("b.example")+": "+err.Error()))
		case id.TrustDomain().String() != s.TrustDomain:
			// The endpoint is authenticated with the bundle held for this domain, so
			// its ID must be of this domain (a trustsync signer's is EndpointID).
			errs = append(errs, field.Invalid(prof.Child("endpointSPIFFEID"), s.BundleEndpointProfile.EndpointSPIFFEID, fmt.Sprintf("must be in trust domain %q, whose bundle authenticates it", s.TrustDomain)))
		}
		if strings.TrimSpace(s.TrustDomainBundle) == "" {
			errs = append(errs, field.Required(p.Child("trustDomainBundle"), "https_spiffe authenticates the endpoint with the peer's bundle: give its current bundle (PEM or SPIFFE JSON) to start from"))
		}
	case ProfileWeb:
		if s.BundleEndpointProfile.EndpointSPIFFEID != "" {
			errs = append(errs, field.Forbidden(prof.Child("endpointSPIFFEID"), "only https_spiffe authenticates a SPIFFE ID; https_web uses the system's roots and the URL's host"))
		}
	default:
		errs = append(errs, field.NotSupported(prof.Child("type"), s.BundleEndpointProfile.Type, []string{ProfileSPIFFE, ProfileWeb}))
	}
	if int64(len(s.TrustDomainBundle)) > maxBootstrapBundleLength {
		errs = append(errs, field.TooLong(p.Child("trustDomainBundle"), "", int(maxBootstrapBundleLength)))
	}
	return errs
}

// FromUnstructured decodes a FederatedTrustDomain read through a dynamic client.
func FromUnstructured(u *unstructured.Unstructured) (*FederatedTrustDomain, error) {
	f := &FederatedTrustDomain{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, f); err != nil {
		return nil, fmt.Errorf("FederatedTrustDomain %s: %w", u.GetName(), err)
	}
	return f, nil
}
