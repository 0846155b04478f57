// Package contract is the one agreement between the injector, which writes the
// sidecar's command line into a pod, and the sidecar, which parses it: the flags and
// their defaults, the sources list they carry, the files the sidecar reserves and the
// key types it generates. The injector builds a Spec and renders it with Args; the
// sidecar registers the same flags with AddFlags and reads them back with
// Flags.Spec. A round-trip test keeps the two halves equal, and no flag name is
// spelled outside this package.
//
// It links no client-go, so the injector stays a pure function of (pod, config).
package contract

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/kubeapi/clientflags"
	"github.com/trustsync/trustsync/policy"
	"github.com/trustsync/trustsync/tenancy"
)

// The sidecar's flags. The first group is what the injector sets per pod (a Spec);
// the second is how the sidecar reaches the API server and who it is (a Runtime),
// mostly left to defaults and the downward API's environment.
const (
	FlagDir     = "dir"
	FlagSources = "sources"
	// flagSourcesFormer is what --sources was called: pods injected before the rename
	// still pass it, so it is still read, hidden and deprecated.
	flagSourcesFormer                = "projections"
	FlagCertificate                  = "certificate"
	FlagCertificateSigner            = "certificate-signer"
	FlagCertificateKeyType           = "certificate-key-type"
	FlagCertificateExpirationSeconds = "certificate-expiration-seconds"
	FlagCertificateDNSNames          = "certificate-dns-names"
	FlagCertificateCredentialBundle  = "certificate-credential-bundle"
	FlagTrustDomain                  = "trust-domain"
	FlagStateDir                     = "state-dir"
	FlagReloadURL                    = "reload-url"
	FlagReloadSignal                 = "reload-signal"
	FlagReloadContainer              = "reload-container"
	FlagReloadSettle                 = "reload-settle"
	FlagExpiryWarningDays            = "expiry-warning-days"

	FlagPodName              = "pod-name"
	FlagPodNamespace         = "pod-namespace"
	FlagPodUID               = "pod-uid"
	FlagServiceAccount       = "service-account"
	FlagTerminationLog       = "termination-log"
	FlagMetricsBindAddress   = "metrics-bind-address"
	FlagAPIDiscoveryInterval = "api-discovery-interval"
	FlagInitTimeoutSeconds   = "init-timeout-seconds"
)

// Flag renders one flag with its value ("--name=value").
func Flag(name, value string) string { return "--" + name + "=" + value }

// DefaultKeyType is the workload certificate's key type when none is asked for.
const DefaultKeyType = policy.KeyECDSAP256

// KeyTypes are the key types the sidecar generates for a workload certificate (named
// as policy names them), in the order the docs give them.
var KeyTypes = []string{policy.KeyECDSAP256, policy.KeyECDSAP384, policy.KeyRSA2048, policy.KeyRSA3072, policy.KeyED25519}

// Spec is what the injector decides for one pod's sidecar.
type Spec struct {
	// Dir is the shared volume, as mounted into the sidecar.
	Dir string
	// Sources are the trust files to write and where their anchors come from.
	Sources []v1alpha1.Source
	// Certificate asks for a rotating workload certificate; nil asks for none.
	Certificate *Certificate
	// Reload tells the app when what it trusts or presents changed; nil: never.
	Reload *Reload
	// ExpiryWarningDays: a Warning Event on the pod for each anchor written that
	// expires this soon (at most once a day per anchor); 0 for none.
	ExpiryWarningDays int
}

// DefaultExpiryWarningDays is the policy's default, and the sidecar's.
const DefaultExpiryWarningDays = 30

// Reload is how the app is told that what it trusts or presents changed: a POST to a
// URL on the pod's loopback, a signal to one container's main process, or both.
type Reload struct {
	URL    string
	Signal string
	// Container is the container that receives Signal. The injector mounts
	// ReloadMarkerPath into it alone, which is how the sidecar finds its processes.
	Container string
	// Settle paces the reloads: the first change after Settle without a reload is
	// told at once; changes within Settle of a reload are told together once none
	// came for Settle (at most ReloadMaxDelay after the first). 0 tells every change
	// at once.
	Settle time.Duration
}

// DefaultReloadSettle is Reload.Settle unless a pod asks for another, and
// ReloadMaxDelay the longest any change waits to be told, and so Settle's maximum.
const (
	DefaultReloadSettle = 2 * time.Second
	ReloadMaxDelay      = 30 * time.Second
)

// ReloadMarkerPath is mounted into the container that receives the reload signal and
// no other: the sidecar reads each process's mount table (world-readable, unlike its
// environment) and signals the processes that have this mount point.
const ReloadMarkerPath = "/var/run/trustsync-reload-target"

// ReloadSignals are the signals an app may ask to be reloaded with: the conventional
// reload signals. Others would stop most apps.
var ReloadSignals = []string{"SIGHUP", "SIGUSR1", "SIGUSR2"}

// ValidateReloadURL checks a reload URL: http or https to 127.0.0.1 or localhost,
// with an optional port and no user information. The request never leaves the pod.
func ValidateReloadURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("is not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("must be an http or https URL, such as http://127.0.0.1:8080/-/reload")
	case u.User != nil:
		return fmt.Errorf("must not carry user information; the reload request carries no credentials")
	case u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost":
		return fmt.Errorf("must be on the pod's loopback (host 127.0.0.1 or localhost), not %q: the reload request must not leave the pod", u.Hostname())
	case u.Port() != "":
		if n, err := strconv.Atoi(u.Port()); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("has port %q; a port is 1 to 65535", u.Port())
		}
	}
	return nil
}

// Certificate is the workload certificate a sidecar obtains and rotates.
type Certificate struct {
	Signer  string
	KeyType string
	// ExpirationSeconds is the lifetime to request; 0 leaves it to the signer.
	ExpirationSeconds int32
	DNSNames          []string
	// CredentialBundle also writes credential.pem (key, then chain).
	CredentialBundle bool
	// TrustDomain is the SPIFFE trust domain of the identity requested.
	TrustDomain string
	// StateDir is a sidecar-only directory keeping a pending key across restarts.
	StateDir string
}

// Identity is the SPIFFE ID requested for ServiceAccount serviceAccount of
// namespace, in the certificate's trust domain.
func (c Certificate) Identity(namespace, serviceAccount string) (spiffeid.ID, error) {
	td, err := c.domain()
	if err != nil {
		return spiffeid.ID{}, err
	}
	return policy.WorkloadID(td, namespace, serviceAccount)
}

// domain is the certificate's trust domain as go-spiffe takes it (a bare name: a
// SPIFFE ID is refused, it would be doubled in the identity).
func (c Certificate) domain() (spiffeid.TrustDomain, error) {
	td, err := spiffeid.TrustDomainFromString(c.TrustDomain)
	if err != nil || strings.Contains(c.TrustDomain, "://") {
		return td, fmt.Errorf("--%s %q %s", FlagTrustDomain, c.TrustDomain, policy.TrustDomainRule)
	}
	return td, nil
}

// Args renders the spec as the sidecar's flags, in a fixed order.
func (s Spec) Args() []string {
	args := append([]string{Flag(FlagDir, s.Dir), Flag(FlagSources, v1alpha1.EncodeSources(s.Sources))}, s.optionArgs()...)
	c := s.Certificate
	if c == nil {
		return args
	}
	args = append(args, "--"+FlagCertificate, Flag(FlagCertificateSigner, c.Signer), Flag(FlagCertificateKeyType, c.KeyType))
	if c.ExpirationSeconds != 0 {
		args = append(args, Flag(FlagCertificateExpirationSeconds, strconv.Itoa(int(c.ExpirationSeconds))))
	}
	if len(c.DNSNames) > 0 {
		args = append(args, Flag(FlagCertificateDNSNames, strings.Join(c.DNSNames, ",")))
	}
	if c.CredentialBundle {
		args = append(args, "--"+FlagCertificateCredentialBundle)
	}
	return append(args, Flag(FlagTrustDomain, c.TrustDomain), Flag(FlagStateDir, c.StateDir))
}

// optionArgs renders what applies to every file: reloads and expiry warnings. The
// default warning window is left out, so pods injected before the flag read the same.
func (s Spec) optionArgs() []string {
	var args []string
	if r := s.Reload; r != nil {
		if r.URL != "" {
			args = append(args, Flag(FlagReloadURL, r.URL))
		}
		if r.Signal != "" {
			args = append(args, Flag(FlagReloadSignal, r.Signal), Flag(FlagReloadContainer, r.Container))
		}
		// The default is left out, so pods injected before the flag read the same.
		if r.Settle != DefaultReloadSettle {
			args = append(args, Flag(FlagReloadSettle, r.Settle.String()))
		}
	}
	if s.ExpiryWarningDays != DefaultExpiryWarningDays {
		args = append(args, Flag(FlagExpiryWarningDays, strconv.Itoa(s.ExpiryWarningDays)))
	}
	return args
}

// Validate checks what every subcommand needs: a directory, something to write, and
// a certificate the sidecar can ask for.
func (s Spec) Validate() error {
	var errs []error
	if s.Dir == "" {
		errs = append(errs, fmt.Errorf("--%s is required: the directory to write the trust files into", FlagDir))
	}
	if len(s.Sources) == 0 && s.Certificate == nil {
		errs = append(errs, fmt.Errorf("--%s is required (or --%s): nothing to write otherwise", FlagSources, FlagCertificate))
	}
	if c := s.Certificate; c != nil {
		if !slices.Contains(KeyTypes, c.KeyType) {
			errs = append(errs, fmt.Errorf("--%s %q is not one of %s", FlagCertificateKeyType, c.KeyType, strings.Join(KeyTypes, ", ")))
		}
		if c.ExpirationSeconds < 0 {
			errs = append(errs, fmt.Errorf("--%s %d is negative; use 0 for the signer's default", FlagCertificateExpirationSeconds, c.ExpirationSeconds))
		}
		if _, err := c.domain(); err != nil {
			errs = append(errs, err)
		}
	}
	if r := s.Reload; r != nil {
		if r.URL != "" {
			if err := ValidateReloadURL(r.URL); err != nil {
				errs = append(errs, fmt.Errorf("--%s %q %w", FlagReloadURL, r.URL, err))
			}
		}
		if r.Signal != "" && !slices.Contains(ReloadSignals, r.Signal) {
			errs = append(errs, fmt.Errorf("--%s %q is not one of %s", FlagReloadSignal, r.Signal, strings.Join(ReloadSignals, ", ")))
		}
		if r.Settle < 0 || r.Settle > ReloadMaxDelay {
			errs = append(errs, fmt.Errorf("--%s %s must be between 0s and %s", FlagReloadSettle, r.Settle, ReloadMaxDelay))
		}
		if r.Signal != "" && r.Container == "" {
			errs = append(errs, fmt.Errorf("--%s is required with --%s: the container whose processes get the signal", FlagReloadContainer, FlagReloadSignal))
		}
	}
	if s.ExpiryWarningDays < 0 {
		errs = append(errs, fmt.Errorf("--%s %d is negative; use 0 for no warnings", FlagExpiryWarningDays, s.ExpiryWarningDays))
	}
	return errors.Join(errs...)
}

// Runtime is how the sidecar reaches the API server and who it runs for: defaults,
// the environment the injector fills from the downward API, and flags for running it
// by hand.
type Runtime struct {
	clientflags.Flags
	PodName        string
	PodNamespace   string
	PodUID         string
	ServiceAccount string
	TerminationLog string
	MetricsAddress string
	// APIDiscoveryInterval is how often run asks which bundle APIs are served.
	APIDiscoveryInterval time.Duration
	InitTimeoutSecs      int
}

// Environment variables the injector sets from the downward API.
const (
	EnvPodName        = "POD_NAME"
	EnvPodNamespace   = "POD_NAMESPACE"
	EnvPodUID         = "POD_UID"
	EnvServiceAccount = "SERVICE_ACCOUNT"
)

// DefaultRuntime returns the defaults, with the pod's identity from the environment.
func DefaultRuntime() Runtime {
	return Runtime{
		Flags:                clientflags.Flags{QPS: 5, Burst: 10},
		PodName:              os.Getenv(EnvPodName),
		PodNamespace:         os.Getenv(EnvPodNamespace),
		PodUID:               os.Getenv(EnvPodUID),
		ServiceAccount:       os.Getenv(EnvServiceAccount),
		TerminationLog:       "/dev/termination-log",
		InitTimeoutSecs:      60,
		APIDiscoveryInterval: 5 * time.Minute,
	}
}

// Flags are the sidecar's registered flags; Spec reads the parsed Spec back.
type Flags struct {
	dir     string
	sources string
	// formerSources is --projections, --sources' name until pods injected before the
	// rename are gone.
	formerSources string
	certificate   bool
	cert          Certificate
	reload        Reload
	reloadSettle  time.Duration
	expiryDays    int
}

// AddFlags registers every flag of the sidecar on fs: the Spec's, read back with
// Flags.Spec after parsing, and rt's, parsed into rt (whose values are the defaults).
func AddFlags(fs *pflag.FlagSet, rt *Runtime) *Flags {
	f := &Flags{cert: Certificate{Signer: policy.DefaultSignerName, KeyType: DefaultKeyType, TrustDomain: policy.DefaultTrustDomain}}
	fs.StringVar(&f.dir, FlagDir, "", "Directory (the shared volume) to write the trust files into.")
	fs.StringVar(&f.sources, FlagSources, "", `The sources to write, as the JSON list of the trustsync.io/sources annotation, e.g. [{"signerName":"example.com/s","labelSelector":{},"path":"ca_certificates.pem"}]. An item's "format" is pem (the default), pkcs12 or jks (a Java truststore, password "changeit" unless "passwordSecret" names a Secret key).`)
	// The flag's former name, which pods injected before the rename still carry.
	fs.StringVar(&f.formerSources, flagSourcesFormer, "", "Former name of --"+FlagSources+".")
	_ = fs.MarkDeprecated(flagSourcesFormer, "use --"+FlagSources)
	fs.BoolVar(&f.certificate, FlagCertificate, false, "Also obtain and rotate a workload certificate ("+v1alpha1.FileCertificate+", "+v1alpha1.FileKey+").")
	fs.StringVar(&f.cert.Signer, FlagCertificateSigner, f.cert.Signer, "Signer to request the workload certificate from.")
	fs.Int32Var(&f.cert.ExpirationSeconds, FlagCertificateExpirationSeconds, 0, "Lifetime to request; 0 means the signer's default.")
	fs.StringSliceVar(&f.cert.DNSNames, FlagCertificateDNSNames, nil, "DNS names for the workload certificate, comma-separated.")
	fs.StringVar(&f.cert.KeyType, FlagCertificateKeyType, f.cert.KeyType, "Key type: "+strings.Join(KeyTypes, ", ")+".")
	fs.BoolVar(&f.cert.CredentialBundle, FlagCertificateCredentialBundle, false, "Also write "+v1alpha1.FileCredentialBundle+" (key, then chain).")
	fs.StringVar(&f.cert.TrustDomain, FlagTrustDomain, f.cert.TrustDomain, "SPIFFE trust domain of the workload identity.")
	fs.StringVar(&f.cert.StateDir, FlagStateDir, "", "Sidecar-only directory that keeps a pending private key across sidecar restarts.")
	fs.StringVar(&f.reload.URL, FlagReloadURL, "", "URL on the pod's loopback (http or https, host 127.0.0.1 or localhost) to POST to after the set of anchors of a file, or the workload certificate, changed. Not at start-up.")
	fs.StringVar(&f.reload.Signal, FlagReloadSignal, "", "Signal ("+strings.Join(ReloadSignals, ", ")+") to send to the main process of --"+FlagReloadContainer+" after the set of anchors of a file, or the workload certificate, changed. Needs the pod's process namespace shared. Not at start-up.")
	fs.StringVar(&f.reload.Container, FlagReloadContainer, "", "The container that gets --"+FlagReloadSignal+"; the injector mounts "+ReloadMarkerPath+" into it alone, which is how its processes are found.")
	fs.DurationVar(&f.reloadSettle, FlagReloadSettle, DefaultReloadSettle, "How reloads are paced: the first change after this long without a reload is told at once; changes within it of a reload are told together once none came for this long (at most "+ReloadMaxDelay.String()+" after the first). 0 tells every change at once.")
	fs.IntVar(&f.expiryDays, FlagExpiryWarningDays, DefaultExpiryWarningDays, "Record a Warning Event on the pod, at most once a day per anchor, for each anchor written that expires within this many days. 0 for none.")

	rt.Flags.AddFlags(fs, "the pod's ServiceAccount", "")
	fs.StringVar(&rt.PodName, FlagPodName, rt.PodName, "The pod's name, for Events (default: $"+EnvPodName+").")
	fs.StringVar(&rt.PodNamespace, FlagPodNamespace, rt.PodNamespace, "The pod's namespace: where ConfigMap and Secret sources are read, and Events go (default: $"+EnvPodNamespace+").")
	fs.StringVar(&rt.PodUID, FlagPodUID, rt.PodUID, "The pod's uid, so Events show in 'kubectl describe pod' (default: $"+EnvPodUID+").")
	fs.StringVar(&rt.ServiceAccount, FlagServiceAccount, rt.ServiceAccount, "The pod's ServiceAccount, for the certificate's SPIFFE ID (default: $"+EnvServiceAccount+").")
	fs.StringVar(&rt.TerminationLog, FlagTerminationLog, rt.TerminationLog, "File that receives the one-line reason when init fails, for 'kubectl describe pod'.")
	fs.StringVar(&rt.MetricsAddress, FlagMetricsBindAddress, rt.MetricsAddress, "Address to serve /metrics on, e.g. :9090. Empty (the default) serves none: the pod's ports belong to the app.")
	fs.DurationVar(&rt.APIDiscoveryInterval, FlagAPIDiscoveryInterval, rt.APIDiscoveryInterval, "How often run asks the API server whether a bundle API it does not watch yet is served now, so a mirror CRD installed, or a newer native API version turned on, after the pod started is watched without a restart. 0 asks only at start. An API that goes away is noticed by its watch (404) either way.")
	fs.IntVar(&rt.InitTimeoutSecs, FlagInitTimeoutSeconds, rt.InitTimeoutSecs, "How long init waits for the API server before giving up (the kubelet then restarts it).")
	return f
}

// Spec returns the parsed Spec, with its sources decoded and validated.
func (f *Flags) Spec() (Spec, error) {
	s := Spec{Dir: f.dir, ExpiryWarningDays: f.expiryDays}
	if f.reload != (Reload{}) {
		r := f.reload
		r.Settle = f.reloadSettle
		s.Reload = &r
	}
	list, flag := f.sources, FlagSources
	if f.formerSources != "" {
		if f.sources != "" && f.sources != f.formerSources {
			return s, fmt.Errorf("--%s and --%s (its former name) are both set, and differ; give --%s alone", FlagSources, flagSourcesFormer, FlagSources)
		}
		list, flag = f.formerSources, flagSourcesFormer
	}
	if list != "" && list != "[]" {
		sources, err := v1alpha1.ParseSources([]byte(list))
		if err != nil {
			return s, fmt.Errorf("--%s: %w", flag, err)
		}
		s.Sources = sources
	}
	if f.certificate {
		c := f.cert
		s.Certificate = &c
	}
	return s, s.Validate()
}

// Validate checks what run and init need on top of the spec: the pod's namespace for
// namespaced sources, and its identity and a state directory for a certificate.
func (rt Runtime) Validate(s Spec) error {
	var errs []error
	if err := rt.Flags.Validate(); err != nil {
		errs = append(errs, err)
	}
	if rt.APIDiscoveryInterval < 0 {
		errs = append(errs, fmt.Errorf("--%s %s is negative; use 0 to discover only at start", FlagAPIDiscoveryInterval, rt.APIDiscoveryInterval))
	}
	if rt.PodNamespace == "" && slices.ContainsFunc(s.Sources, func(src v1alpha1.Source) bool {
		return src.ConfigMap != nil || src.Secret != nil || src.PasswordSecret != nil
	}) {
		errs = append(errs, fmt.Errorf("--%s (or $%s) is required for ConfigMap and Secret sources and truststore passwords", FlagPodNamespace, EnvPodNamespace))
	}
	if c := s.Certificate; c != nil {
		for _, req := range []struct{ flag, value string }{
			{FlagPodName, rt.PodName}, {FlagPodNamespace, rt.PodNamespace}, {FlagServiceAccount, rt.ServiceAccount},
			{FlagStateDir, c.StateDir}, {FlagTrustDomain, c.TrustDomain},
		} {
			if req.value == "" {
				errs = append(errs, fmt.Errorf("--%s is required with --%s: it names the certificate's identity or keeps its pending key", req.flag, FlagCertificate))
			}
		}
	}
	return errors.Join(errs...)
}

// Asks is what the Spec asks of trustsync that a namespace's grants must cover (its
// sources, and a certificate), each said to be asked where.
func (s Spec) Asks(where string) []tenancy.Ask {
	var asks []tenancy.Ask
	for i := range s.Sources {
		asks = append(asks, tenancy.Ask{Where: where, Source: &s.Sources[i]})
	}
	if c := s.Certificate; c != nil {
		asks = append(asks, tenancy.Ask{Where: where, Signer: c.Signer, DNSNames: c.DNSNames})
	}
	return asks
}
