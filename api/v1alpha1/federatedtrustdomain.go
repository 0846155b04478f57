package v1alpha1

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trustsync/trustsync/bundle"
)

// FederatedTrustDomain's kind and resource.
const FederatedTrustDomainKind = "FederatedTrustDomain"

var FederatedTrustDomainResource = GroupVersion.WithResource("federatedtrustdomains")

// FederatedSignerName is the signer of every imported bundle: pods select a peer's
// anchors by it and the trust-domain label, and only trustsync-controller may attest
// for it.
const FederatedSignerName = "trustsync.io/federated"

// TrustDomainLabel, on an imported bundle, names the peer trust domain it holds.
const TrustDomainLabel = "trustsync.io/trust-domain"

// BundleEndpointPath is the path of the SPIFFE ID a trustsync signer's bundle endpoint
// presents for a trust domain: spiffe://TD/trustsync/bundle-endpoint.
const BundleEndpointPath = "/trustsync/bundle-endpoint"

// Profiles of a bundle endpoint, as the SPIFFE Trust Domain and Bundle spec names them.
const (
	ProfileSPIFFE = "https_spiffe"
	ProfileWeb    = "https_web"
)

// The reasons of a FederatedTrustDomain's Ready condition (with ReasonInvalidSpec and
// ReasonConflict); when not ready, the last good anchors are kept in every case.
const (
	ReasonEndpointUnreachable     = "EndpointUnreachable"
	ReasonEndpointUnauthenticated = "EndpointUnauthenticated"
	ReasonSequenceRegressed       = "SequenceRegressed"
	ReasonInvalidBundle           = "InvalidBundle"
	ReasonRefreshed               = "Refreshed"
	ReasonBundleWriteFailed       = "BundleWriteFailed"
)

const (
	maxTrustDomainLength           = 63
	maxEndpointURLLength           = 2048
	maxBootstrapBundleLength int64 = 1 << 20
)

// FederatedTrustDomain imports a peer trust domain's bundle from its SPIFFE bundle
// endpoint. It is cluster-scoped and shaped like spire-controller-manager's
// ClusterFederatedTrustDomain so SPIRE users recognise it: the peer, the endpoint
// that serves its bundle, how that endpoint is authenticated, and the bundle to
// start from. controller/federation keeps them; kubectl trustsync prints them.
type FederatedTrustDomain struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              FederatedTrustDomainSpec   `json:"spec"`
	Status            FederatedTrustDomainStatus `json:"status,omitempty"`
}

// FederatedTrustDomainSpec is the peer and how to reach it.
type FederatedTrustDomainSpec struct {
	// TrustDomain is the peer's SPIFFE trust domain, such as b.example.
	TrustDomain string `json:"trustDomain"`
	// BundleEndpointURL serves the peer's bundle (https only).
	BundleEndpointURL string `json:"bundleEndpointURL"`
	// BundleEndpointProfile says how the endpoint is authenticated.
	BundleEndpointProfile BundleEndpointProfile `json:"bundleEndpointProfile"`
	// TrustDomainBundle is the bundle to start from: PEM certificates or a SPIFFE
	// bundle (JWKS). https_spiffe needs it to authenticate the first fetch.
	TrustDomainBundle string `json:"trustDomainBundle,omitempty"`
}

// BundleEndpointProfile is a bundle endpoint profile.
type BundleEndpointProfile struct {
	// Type is https_spiffe or https_web.
	Type string `json:"type"`
	// EndpointSPIFFEID is the SPIFFE ID the endpoint must present (https_spiffe).
	EndpointSPIFFEID string `json:"endpointSPIFFEID,omitempty"`
}

// FederatedTrustDomainStatus says whether the peer's bundle arrived, and where it
// stands in this cluster.
type FederatedTrustDomainStatus struct {
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

// BundleEndpointID is the SPIFFE ID a trustsync bundle endpoint presents for td.
func BundleEndpointID(td string) string { return "spiffe://" + td + BundleEndpointPath }

// FederatedBundleName is the imported bundle's name for td, in upstream form.
func FederatedBundleName(td string) string {
	return bundle.NamePrefix(FederatedSignerName, bundle.NativeForm) + td
}

// ParsedFederatedTrustDomainSpec is a FederatedTrustDomain's spec as the controller
// and the plugin use it.
type ParsedFederatedTrustDomainSpec struct {
	TrustDomain spiffeid.TrustDomain
	EndpointURL *url.URL
	// Profile is ProfileSPIFFE or ProfileWeb; EndpointID is set with ProfileSPIFFE.
	Profile    string
	EndpointID spiffeid.ID
	// Bootstrap is spec.trustDomainBundle read (nil when absent): what the first
	// fetch is authenticated with, and what is imported before it answers.
	Bootstrap *spiffebundle.Bundle
	// BundleName is the ClusterTrustBundle the anchors are written to.
	BundleName string
}

// ParseFederatedTrustDomainSpec checks what the CRD's schema cannot (go-spiffe's rule
// for trust domains and IDs, an https endpoint, the profile's needs, a bootstrap
// bundle that can be imported) and returns the spec's typed values; the error is a
// field.ErrorList's aggregate, naming each offending field and value.
func ParseFederatedTrustDomainSpec(s *FederatedTrustDomainSpec) (*ParsedFederatedTrustDomainSpec, error) {
	var errs field.ErrorList
	parsed := &ParsedFederatedTrustDomainSpec{Profile: s.BundleEndpointProfile.Type, BundleName: FederatedBundleName(s.TrustDomain)}
	p := field.NewPath("spec")
	td, err := spiffeid.TrustDomainFromString(s.TrustDomain)
	parsed.TrustDomain = td
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
	parsed.EndpointURL = u
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
		parsed.EndpointID = id
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(prof.Child("endpointSPIFFEID"), s.BundleEndpointProfile.EndpointSPIFFEID, "must be a SPIFFE ID, such as "+BundleEndpointID("b.example")+": "+err.Error()))
		case id.TrustDomain().String() != s.TrustDomain:
			// The endpoint is authenticated with the bundle held for this domain, so
			// its ID must be of this domain (a trustsync signer's is BundleEndpointID).
			errs = append(errs, field.Invalid(prof.Child("endpointSPIFFEID"), s.BundleEndpointProfile.EndpointSPIFFEID, fmt.Sprintf("must be in trust domain %q, whose bundle authenticates it", s.TrustDomain)))
		}
		if strings.TrimSpace(s.TrustDomainBundle) == "" {
			errs = append(errs, field.Required(p.Child("trustDomainBundle"), "https_spiffe authenticates the endpoint with the peer's bundle: give its current bundle (BundlePEM or SPIFFE JSON) to start from"))
		}
	case ProfileWeb:
		if s.BundleEndpointProfile.EndpointSPIFFEID != "" {
			errs = append(errs, field.Forbidden(prof.Child("endpointSPIFFEID"), "only https_spiffe authenticates a SPIFFE ID; https_web uses the system's roots and the URL's host"))
		}
	default:
		errs = append(errs, field.NotSupported(prof.Child("type"), s.BundleEndpointProfile.Type, []string{ProfileSPIFFE, ProfileWeb}))
	}
	switch {
	case int64(len(s.TrustDomainBundle)) > maxBootstrapBundleLength:
		errs = append(errs, field.TooLong(p.Child("trustDomainBundle"), "", int(maxBootstrapBundleLength)))
	case strings.TrimSpace(s.TrustDomainBundle) != "" && !td.IsZero():
		b, err := ParseSPIFFEBundle(td, []byte(s.TrustDomainBundle))
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("trustDomainBundle"), "", "the bundle to start from cannot be imported: "+err.Error()))
		}
		parsed.Bootstrap = b
	}
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return parsed, nil
}

// FederatedTrustDomainFromUnstructured decodes a FederatedTrustDomain read through a dynamic client.
func FederatedTrustDomainFromUnstructured(u *unstructured.Unstructured) (*FederatedTrustDomain, error) {
	return fromUnstructured[FederatedTrustDomain](u, FederatedTrustDomainKind+" %s")
}
