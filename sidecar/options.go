package sidecar

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"github.com/trustsync/trustsync/bundle"
)

// Options are the sidecar's command line, as docs/design.md fixes it; the injector
// emits exactly these.
type Options struct {
	Dir             string
	Projections     string
	Kubeconfig      string
	KubeAPIQPS      float32
	KubeAPIBurst    int
	PodName         string
	PodNamespace    string
	PodUID          string
	TerminationLog  string
	MetricsAddress  string
	ServiceAccount  string
	TrustDomain     string
	StateDir        string
	InitTimeoutSecs int
	// APIDiscoveryInterval is how often run asks which bundle APIs are served.
	APIDiscoveryInterval time.Duration

	Certificate                  bool
	CertificateSigner            string
	CertificateExpirationSeconds int32
	CertificateDNSNames          []string
	CertificateKeyType           string
	CertificateCredentialBundle  bool

	// sources is Projections, parsed by Validate.
	sources []bundle.Source
}

// NewOptions returns the defaults, taking the pod's identity from the environment the
// injector fills from the downward API.
func NewOptions() *Options {
	return &Options{
		KubeAPIQPS:           5,
		KubeAPIBurst:         10,
		PodName:              os.Getenv("POD_NAME"),
		PodNamespace:         os.Getenv("POD_NAMESPACE"),
		PodUID:               os.Getenv("POD_UID"),
		ServiceAccount:       os.Getenv("SERVICE_ACCOUNT"),
		TerminationLog:       "/dev/termination-log",
		CertificateSigner:    "trustsync.io/workload",
		CertificateKeyType:   "ECDSAP256",
		TrustDomain:          "cluster.local",
		InitTimeoutSecs:      60,
		APIDiscoveryInterval: 5 * time.Minute,
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Dir, "dir", o.Dir, "Directory (the shared volume) to write the trust files into.")
	fs.StringVar(&o.Projections, "projections", o.Projections, `The sources to write, as the JSON list of the trustsync.io/bundles annotation, e.g. [{"signerName":"example.com/s","labelSelector":{},"path":"ca_certificates.pem"}].`)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig file. Empty means in-cluster configuration (the pod's ServiceAccount).")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Queries per second to the API server.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of queries to the API server.")
	fs.StringVar(&o.PodName, "pod-name", o.PodName, "The pod's name, for Events (default: $POD_NAME).")
	fs.StringVar(&o.PodNamespace, "pod-namespace", o.PodNamespace, "The pod's namespace: where ConfigMap and Secret sources are read, and Events go (default: $POD_NAMESPACE).")
	fs.StringVar(&o.PodUID, "pod-uid", o.PodUID, "The pod's uid, so Events show in `kubectl describe pod` (default: $POD_UID).")
	fs.StringVar(&o.TerminationLog, "termination-log", o.TerminationLog, "File that receives the one-line reason when init fails, for `kubectl describe pod`.")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, "Address to serve /metrics on, e.g. :9090. Empty (the default) serves none: the pod's ports belong to the app.")
	fs.DurationVar(&o.APIDiscoveryInterval, "api-discovery-interval", o.APIDiscoveryInterval, "How often run asks the API server which bundle APIs it serves, so a mirror CRD installed, or a native API version turned on, after the pod started is watched without a restart. 0 asks only at start.")
	fs.IntVar(&o.InitTimeoutSecs, "init-timeout-seconds", o.InitTimeoutSecs, "How long init waits for the API server before giving up (the kubelet then restarts it).")

	fs.BoolVar(&o.Certificate, "certificate", o.Certificate, "Also obtain and rotate a workload certificate (tls.crt, tls.key).")
	fs.StringVar(&o.CertificateSigner, "certificate-signer", o.CertificateSigner, "Signer to request the workload certificate from.")
	fs.Int32Var(&o.CertificateExpirationSeconds, "certificate-expiration-seconds", o.CertificateExpirationSeconds, "Lifetime to request; 0 means the signer's default.")
	fs.StringSliceVar(&o.CertificateDNSNames, "certificate-dns-names", o.CertificateDNSNames, "DNS names for the workload certificate, comma-separated.")
	fs.StringVar(&o.CertificateKeyType, "certificate-key-type", o.CertificateKeyType, "Key type: ECDSAP256, ECDSAP384, RSA2048, RSA3072 or ED25519.")
	fs.BoolVar(&o.CertificateCredentialBundle, "certificate-credential-bundle", o.CertificateCredentialBundle, "Also write credential.pem (key, then chain).")
	fs.StringVar(&o.ServiceAccount, "service-account", o.ServiceAccount, "The pod's ServiceAccount, for the certificate's SPIFFE ID (default: $SERVICE_ACCOUNT).")
	fs.StringVar(&o.TrustDomain, "trust-domain", o.TrustDomain, "SPIFFE trust domain of the workload identity.")
	fs.StringVar(&o.StateDir, "state-dir", o.StateDir, "Sidecar-only directory that keeps a pending private key across sidecar restarts.")
}

// Validate checks the flags and parses --projections. probe needs only --dir and
// --projections; run and init also need the pod's namespace.
func (o *Options) Validate(needAPI bool) error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("--dir is required: the directory to write the trust files into"))
	}
	if o.APIDiscoveryInterval < 0 {
		errs = append(errs, fmt.Errorf("--api-discovery-interval %s is negative; use 0 to discover only at start", o.APIDiscoveryInterval))
	}
	if o.Projections == "" && !o.Certificate {
		errs = append(errs, errors.New("--projections is required (or --certificate): nothing to write otherwise"))
	}
	if o.Projections != "" && o.Projections != "[]" {
		sources, err := bundle.ParseSources([]byte(o.Projections))
		if err != nil {
			errs = append(errs, fmt.Errorf("--projections: %w", err))
		}
		o.sources = sources
	}
	if needAPI && o.PodNamespace == "" && o.needsNamespace() {
		errs = append(errs, errors.New("--pod-namespace (or $POD_NAMESPACE) is required for ConfigMap and Secret sources"))
	}
	if o.Certificate && needAPI {
		for flag, value := range map[string]string{"--pod-name": o.PodName, "--pod-namespace": o.PodNamespace, "--service-account": o.ServiceAccount, "--state-dir": o.StateDir, "--trust-domain": o.TrustDomain} {
			if value == "" {
				errs = append(errs, fmt.Errorf("%s is required with --certificate: it names the certificate's identity or keeps its pending key", flag))
			}
		}
	}
	if !slices.Contains([]string{"ECDSAP256", "ECDSAP384", "RSA2048", "RSA3072", "ED25519"}, o.CertificateKeyType) {
		errs = append(errs, fmt.Errorf("--certificate-key-type %q is not one of ECDSAP256, ECDSAP384, RSA2048, RSA3072, ED25519", o.CertificateKeyType))
	}
	return errors.Join(errs...)
}

func (o *Options) needsNamespace() bool {
	return slices.ContainsFunc(o.sources, func(s bundle.Source) bool { return s.ConfigMap != nil || s.Secret != nil })
}

// spiffeID is the workload identity the certificate is requested for.
func (o *Options) spiffeID() string {
	return fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", o.TrustDomain, o.PodNamespace, o.ServiceAccount)
}

// requiredPaths lists the files that must exist for the pod to start: every path with
// a non-optional source, and the certificate and key when one is asked for.
func (o *Options) requiredPaths() []string {
	var out []string
	if o.Certificate {
		out = append(out, fileCert, fileKey)
	}
	for _, g := range groupByPath(o.sources) {
		if !g.optional() && !slices.Contains(out, g.path) {
			out = append(out, g.path)
		}
	}
	return out
}
