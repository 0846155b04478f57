// Package policy reads trustsync's policy file, the one source of truth for signers
// (names, durations, approval rules, trust domain) and for bundle admission, shared by
// the webhook and the signer.
package policy

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/keyuri"
)

const (
	// APIVersion and Kind identify a policy file.
	APIVersion = "trustsync.io/v1alpha1"
	Kind       = "Policy"

	// DefaultSignerName is the signer trustsync runs when nothing else is said.
	DefaultSignerName = "trustsync.io/workload"
	// DefaultTrustDomain is the SPIFFE trust domain of workload identities.
	DefaultTrustDomain = "cluster.local"

	// MinimumExpirationSeconds is upstream's floor for a certificate's requested
	// duration (KEP-2784); no policy may go below it.
	MinimumExpirationSeconds = 600

	defaultMaxExpirationSeconds     = 7 * 24 * 3600
	defaultDefaultExpirationSeconds = 24 * 3600
	defaultExpiryWarningDays        = 30
)

// OverMaximum says what happens to a request for more than a signer's maximum.
type OverMaximum string

const (
	// Clamp shortens the request to the maximum (the mutating webhook rewrites it, with
	// a warning). It is the default, as upstream signers clamp.
	Clamp OverMaximum = "Clamp"
	// Reject refuses the request.
	Reject OverMaximum = "Reject"
)

// Policy is the parsed policy file.
type Policy struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Signers    []Signer `json:"signers,omitempty"`
	Bundles    Bundles  `json:"bundles"`

	// Warnings say what in the file is deprecated and how to write it now; the
	// webhook and the signer log them at start.
	Warnings []string `json:"-"`
}

// Signer holds one signer's rules.
type Signer struct {
	SignerName               string      `json:"signerName"`
	MinExpirationSeconds     int64       `json:"minExpirationSeconds,omitempty"`
	MaxExpirationSeconds     int64       `json:"maxExpirationSeconds,omitempty"`
	DefaultExpirationSeconds int64       `json:"defaultExpirationSeconds,omitempty"`
	OverMaximum              OverMaximum `json:"overMaximum,omitempty"`
	// TrustDomain is the SPIFFE trust domain of the identities this signer certifies:
	// what the approver requires and what injected sidecars request. A signer's
	// property, whether or not trustsync approves its CSRs.
	TrustDomain string `json:"trustDomain,omitempty"`
	// Domain is TrustDomain as go-spiffe parsed it, set by Parse and ForSigners: what
	// every identity of this signer is built from and compared within.
	Domain spiffeid.TrustDomain `json:"-"`
	// Approval configures the signer's approver; nil leaves its CSRs to others.
	Approval *Approval `json:"approval,omitempty"`
	// KeyTypes are the key types the signer issues PodCertificateRequests for, named
	// as the podCertificate volume's keyType; a request for another is denied as
	// UnsupportedKeyType. Default: every type Kubernetes allows.
	KeyTypes []string `json:"keyTypes,omitempty"`
	// KeyRef names the keeper of the signer's CA keys: a PKCS#11 token (an RFC 7512
	// URI) or AWS KMS. Absent, the keys live in the CA Secret.
	KeyRef string `json:"keyRef,omitempty"`
	// Key is KeyRef parsed, set by Parse.
	Key *keyuri.Ref `json:"-"`
}

// Key types, as Kubernetes names them for a podCertificate volume; the one set of
// names every part uses. Which of them a delivery can make differs:
// PodCertificateKeyTypes for the kubelet's, delivery/contract's KeyTypes for the
// sidecar's (RSA2048 is the sidecar's alone).
const (
	KeyECDSAP256 = "ECDSAP256"
	KeyECDSAP384 = "ECDSAP384"
	KeyECDSAP521 = "ECDSAP521"
	KeyED25519   = "ED25519"
	KeyRSA2048   = "RSA2048"
	KeyRSA3072   = "RSA3072"
	KeyRSA4096   = "RSA4096"
)

// PodCertificateDNSNamesAnnotation is the one user annotation trustsync's signer reads
// from a PodCertificateRequest (a podCertificate volume's userAnnotations): DNS names
// for the certificate, comma-separated, each within the signer's dnsNames patterns.
const PodCertificateDNSNamesAnnotation = "trustsync.io/dns-names"

// PodCertificateKeyTypes are every key type Kubernetes allows in a
// PodCertificateRequest, the default of a signer's keyTypes.
var PodCertificateKeyTypes = []string{KeyECDSAP256, KeyECDSAP384, KeyECDSAP521, KeyED25519, KeyRSA3072, KeyRSA4096}

// Approval holds what the signer's approver allows a ServiceAccount to ask for.
type Approval struct {
	// TrustDomain is where the trust domain used to be written.
	//
	// Deprecated: set the signer's trustDomain. Still read, with a warning, when the
	// signer names none.
	TrustDomain string `json:"trustDomain,omitempty"`
	// DNSNames are patterns a requested DNS name must match; "{namespace}" stands for
	// the requester's namespace and each "*" for one whole label (tenancy.MatchDNSName).
	DNSNames    []string `json:"dnsNames,omitempty"`
	IPAddresses bool     `json:"ipAddresses,omitempty"`
	Usages      []string `json:"usages,omitempty"`
}

// Bundles holds the rules for admitting trust bundles.
type Bundles struct {
	// ExpiryWarningDays: an admission warning (and a Warning Event on each pod that
	// trusts it) for each anchor expiring this soon. Unset is 30 days; 0 warns of
	// nothing, so it is a pointer: read it with WarningDays.
	ExpiryWarningDays *int `json:"expiryWarningDays,omitempty"`
	// DenyExpired refuses bundles holding an already expired anchor.
	DenyExpired bool `json:"denyExpired,omitempty"`
}

// DefaultApproval returns the approval rules a signer gets when its entry has none
// written out but asks for approval, and the one-signer shorthand's.
func DefaultApproval() *Approval {
	return &Approval{
		DNSNames: []string{"*.{namespace}.svc", "*.{namespace}.svc.cluster.local"},
		Usages:   []string{"digital signature", "key encipherment", "server auth", "client auth"},
	}
}

// LogWarnings logs each of the policy's warnings, naming the file.
func (p *Policy) LogWarnings(path string) {
	for _, w := range p.Warnings {
		klog.InfoS("The policy file uses a deprecated form", "file", path, "warning", w)
	}
}

// Load reads and checks the policy file at path. An empty path means no file: no
// signer rules, default bundle rules (what the webhook enforces without a policy).
func Load(path string) (*Policy, error) {
	if path == "" {
		return Parse(nil)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read policy file: %w", err)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("policy file %s: %w", path, err)
	}
	return p, nil
}

// Parse parses a policy document strictly (an unknown field is an error, so a typo
// never silently loosens a rule), fills in defaults and validates the result.
func Parse(data []byte) (*Policy, error) {
	p := &Policy{APIVersion: APIVersion, Kind: Kind}
	if len(strings.TrimSpace(string(data))) > 0 {
		if err := yaml.UnmarshalStrict(data, p); err != nil {
			return nil, fmt.Errorf("invalid YAML: %w", err)
		}
	}
	p.setDefaults()
	if errs := p.validate(); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return p, nil
}

// ForSigners returns the policy the signer's --signer-name and --trust-domain flags
// stand for: each signer with default durations and default approval rules.
func ForSigners(signerNames []string, trustDomain string) (*Policy, error) {
	p := &Policy{APIVersion: APIVersion, Kind: Kind}
	for _, name := range signerNames {
		p.Signers = append(p.Signers, Signer{SignerName: name, TrustDomain: trustDomain, Approval: DefaultApproval()})
	}
	p.setDefaults()
	if errs := p.validate(); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return p, nil
}

func (p *Policy) setDefaults() {
	for i := range p.Signers {
		s := &p.Signers[i]
		if a := s.Approval; a != nil && a.TrustDomain != "" && s.TrustDomain == "" {
			s.TrustDomain = a.TrustDomain
			p.Warnings = append(p.Warnings, fmt.Sprintf("signers[%d].approval.trustDomain is deprecated: write it as signers[%d].trustDomain (the trust domain is the signer's, approval or not)", i, i))
		}
		if s.TrustDomain == "" {
			s.TrustDomain = DefaultTrustDomain
		}
		if s.MinExpirationSeconds == 0 {
			s.MinExpirationSeconds = MinimumExpirationSeconds
		}
		if s.MaxExpirationSeconds == 0 {
			s.MaxExpirationSeconds = defaultMaxExpirationSeconds
		}
		if s.DefaultExpirationSeconds == 0 {
			s.DefaultExpirationSeconds = min(defaultDefaultExpirationSeconds, s.MaxExpirationSeconds)
		}
		if s.OverMaximum == "" {
			s.OverMaximum = Clamp
		}
		if s.KeyTypes == nil {
			s.KeyTypes = slices.Clone(PodCertificateKeyTypes)
		}
		if a := s.Approval; a != nil {
			defaults := DefaultApproval()
			if a.DNSNames == nil {
				a.DNSNames = defaults.DNSNames
			}
			if a.Usages == nil {
				a.Usages = defaults.Usages
			}
		}
	}
	if p.Bundles.ExpiryWarningDays == nil {
		p.Bundles.ExpiryWarningDays = ptr.To(defaultExpiryWarningDays)
	}
}

// WarningDays is how many days ahead of an anchor's expiry to warn; 0 for never.
func (b Bundles) WarningDays() int {
	if b.ExpiryWarningDays == nil {
		return defaultExpiryWarningDays
	}
	return *b.ExpiryWarningDays
}

func (p *Policy) validate() field.ErrorList {
	var errs field.ErrorList
	if p.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), p.APIVersion, []string{APIVersion}))
	}
	if p.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), p.Kind, []string{Kind}))
	}
	seen := sets.New[string]()
	for i := range p.Signers {
		s := &p.Signers[i]
		path := field.NewPath("signers").Index(i)
		if seen.Has(s.SignerName) {
			errs = append(errs, field.Duplicate(path.Child("signerName"), s.SignerName))
		}
		seen.Insert(s.SignerName)
		errs = append(errs, s.validate(path)...)
	}
	if d := p.Bundles.WarningDays(); d < 0 {
		errs = append(errs, field.Invalid(field.NewPath("bundles", "expiryWarningDays"), d, "must not be negative; 0 warns of nothing"))
	}
	return errs
}

// validate checks the signer's rules, and parses its trust domain into Domain.
func (s *Signer) validate(path *field.Path) field.ErrorList {
	errs := bundle.ValidateSignerName(path.Child("signerName"), s.SignerName)
	if s.MinExpirationSeconds < MinimumExpirationSeconds {
		errs = append(errs, field.Invalid(path.Child("minExpirationSeconds"), s.MinExpirationSeconds, fmt.Sprintf("must be at least %d (10 minutes), the Kubernetes minimum", MinimumExpirationSeconds)))
	}
	if s.MaxExpirationSeconds < s.MinExpirationSeconds {
		errs = append(errs, field.Invalid(path.Child("maxExpirationSeconds"), s.MaxExpirationSeconds, fmt.Sprintf("must not be less than minExpirationSeconds (%d)", s.MinExpirationSeconds)))
	}
	if s.DefaultExpirationSeconds < s.MinExpirationSeconds || s.DefaultExpirationSeconds > s.MaxExpirationSeconds {
		errs = append(errs, field.Invalid(path.Child("defaultExpirationSeconds"), s.DefaultExpirationSeconds, fmt.Sprintf("must be between minExpirationSeconds (%d) and maxExpirationSeconds (%d)", s.MinExpirationSeconds, s.MaxExpirationSeconds)))
	}
	if s.OverMaximum != Clamp && s.OverMaximum != Reject {
		errs = append(errs, field.NotSupported(path.Child("overMaximum"), s.OverMaximum, []OverMaximum{Clamp, Reject}))
	}
	// go-spiffe's rule, as every SPIFFE verifier applies it: a trust domain it refuses
	// would put URI SANs in certificates that no verifier accepts.
	if td, err := spiffeid.TrustDomainFromString(s.TrustDomain); err != nil || strings.Contains(s.TrustDomain, "://") {
		// Named where the user wrote it, the deprecated place included.
		where := path.Child("trustDomain")
		if s.Approval != nil && s.Approval.TrustDomain == s.TrustDomain {
			where = path.Child("approval", "trustDomain")
		}
		errs = append(errs, field.Invalid(where, s.TrustDomain, TrustDomainRule))
	} else {
		s.Domain = td
	}
	for i, k := range s.KeyTypes {
		if !slices.Contains(PodCertificateKeyTypes, k) {
			errs = append(errs, field.NotSupported(path.Child("keyTypes").Index(i), k, PodCertificateKeyTypes))
		}
	}
	if s.KeyRef != "" {
		key, err := keyuri.Parse(s.KeyRef)
		if err != nil {
			// The error says what is wrong; the value is left out, as it may be a
			// keyRef carrying a PIN.
			errs = append(errs, field.Invalid(path.Child("keyRef"), field.OmitValueType{}, err.Error()))
		}
		s.Key = key
	}
	if s.KeyTypes != nil && len(s.KeyTypes) == 0 {
		errs = append(errs, field.Required(path.Child("keyTypes"), "must list at least one key type, or be left out for all of them"))
	}
	if a := s.Approval; a != nil {
		if a.TrustDomain != "" && a.TrustDomain != s.TrustDomain {
			errs = append(errs, field.Invalid(path.Child("approval", "trustDomain"), a.TrustDomain, fmt.Sprintf("differs from the signer's trustDomain %q; remove it (it is deprecated) and keep the signer's", s.TrustDomain)))
		}
		errs = append(errs, a.validate(path.Child("approval"))...)
	}
	return errs
}

// knownUsages are the key usages a CSR may carry (certificates/v1 KeyUsage values).
var knownUsages = sets.New(
	"signing", "digital signature", "content commitment", "key encipherment", "key agreement",
	"data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
	"server auth", "client auth", "code signing", "email protection", "s/mime",
	"ipsec end system", "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing",
	"microsoft sgc", "netscape sgc",
)

func (a *Approval) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, pattern := range a.DNSNames {
		if pattern == "" {
			errs = append(errs, field.Invalid(path.Child("dnsNames").Index(i), pattern, "must not be empty"))
		}
	}
	for i, u := range a.Usages {
		if !knownUsages.Has(u) {
			errs = append(errs, field.NotSupported(path.Child("usages").Index(i), u, sets.List(knownUsages)))
		}
	}
	return errs
}

// Signer returns the rules for signerName, if the policy has any.
func (p *Policy) Signer(signerName string) (*Signer, bool) {
	for i := range p.Signers {
		if p.Signers[i].SignerName == signerName {
			return &p.Signers[i], true
		}
	}
	return nil, false
}

// SignerNames lists the signers the policy has rules for, in file order.
func (p *Policy) SignerNames() []string {
	names := make([]string, 0, len(p.Signers))
	for _, s := range p.Signers {
		names = append(names, s.SignerName)
	}
	return names
}

// TrustDomainRule is what a trust domain must be, as go-spiffe (and so every SPIFFE
// verifier) takes it.
const TrustDomainRule = "must be a SPIFFE trust domain such as cluster.local: lowercase letters, digits, '.', '-' and '_' only (no scheme, port or path)"

// WorkloadID is the identity a ServiceAccount's workload certificate carries, built
// one way for the approver, the signer of pod certificates, the sidecar and the agent:
// spiffe://<trust domain>/ns/<namespace>/sa/<service account>.
func WorkloadID(td spiffeid.TrustDomain, namespace, serviceAccount string) (spiffeid.ID, error) {
	id, err := spiffeid.FromSegments(td, "ns", namespace, "sa", serviceAccount)
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("cannot form the SPIFFE ID of ServiceAccount %q in namespace %q of trust domain %q: %w", serviceAccount, namespace, td, err)
	}
	return id, nil
}
