package signer

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/kubeapi/clientflags"
	"github.com/trustsync/trustsync/policy"
)

// Options configure the signer. cmd/signer fills them from flags.
type Options struct {
	clientflags.Flags
	// Namespace holds the CA Secrets and the leader-election Lease.
	Namespace   string
	PolicyFile  string
	SignerNames []string
	TrustDomain string
	Workers     int

	HealthAddress        string
	CASecretPrefix       string
	CAValidity           time.Duration
	CARotateAt           float64
	CAPropagationWindow  time.Duration
	CAPropagation        string
	CAPropagationMaxWait time.Duration
	CAPropagationMinWait time.Duration
	// InjectedIndex is NAMESPACE/NAME of the controller's index of annotated
	// objects: a rotation counts those holding the new CA. Empty: not counted.
	InjectedIndex string
	// TenancyEnforced denies requests from namespaces their TrustPolicies do not
	// grant the signer (or the DNS names asked); Namespace is exempt.
	TenancyEnforced bool

	// BundleEndpointAddress serves the trust domains' SPIFFE bundles (empty: none);
	// BundleEndpointRefreshHint is the spiffe_refresh_hint they carry.
	BundleEndpointAddress     string
	BundleEndpointRefreshHint time.Duration
	// BundleEndpointMaxConnections and BundleEndpointIdleTimeout bound what the
	// network can hold of the process that holds the CA keys.
	BundleEndpointMaxConnections int
	// BundleEndpointMaxClientConnections bounds one client's (one source address's)
	// share of them.
	BundleEndpointMaxClientConnections int
	BundleEndpointIdleTimeout          time.Duration
}

// NewOptions returns the defaults. The signer talks to the API server at up to 300
// QPS with bursts of 500: each certificate is one status write, and a node's pods
// starting together, or a cluster's after a rotation, ask for theirs at once; at
// kube-controller-manager's 20 QPS they would wait on the signer's own rate limiter
// (20 issued a second), where the API server's priority and fairness is what protects
// it from a client that asks too much.
func NewOptions() *Options {
	return &Options{
		Flags:                clientflags.Flags{QPS: 300, Burst: 500},
		Namespace:            os.Getenv("POD_NAMESPACE"),
		InjectedIndex:        v1alpha1.DefaultInjectedIndex(os.Getenv("POD_NAMESPACE")),
		TrustDomain:          policy.DefaultTrustDomain,
		Workers:              8,
		HealthAddress:        ":8081",
		CASecretPrefix:       "trustsync-ca-",
		CAValidity:           365 * 24 * time.Hour,
		CARotateAt:           2.0 / 3,
		CAPropagationWindow:  10 * time.Minute,
		CAPropagation:        string(PropagationObserved),
		CAPropagationMaxWait: time.Hour,
		CAPropagationMinWait: DefaultMinWait,

		BundleEndpointRefreshHint:          time.Minute,
		BundleEndpointMaxConnections:       128,
		BundleEndpointMaxClientConnections: 16,
		BundleEndpointIdleTimeout:          30 * time.Second,
	}
}

// LeaderElectUsage is --leader-elect's meaning in the signer; cmd/signer registers the
// leader-election flags, shared with the webhook.
const LeaderElectUsage = "Take a Lease before signing, approving or publishing, so only one replica acts."

// LeaseName is the signer's Lease in --namespace.
const LeaseName = "trustsync-signer"

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	addMovedFlags(fs)
	o.Flags.AddFlags(fs, "the signer's ServiceAccount", "kube-controller-manager uses 20; client-go's default of 5 throttles a burst of CSRs")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the CA Secrets and the leader-election Lease (default: $POD_NAMESPACE).")
	fs.StringVar(&o.PolicyFile, "policy", o.PolicyFile, "Path to the trustsync policy file: the signers to run, their durations and approval rules. Without it, --signer-name and --trust-domain describe the signers.")
	fs.StringSliceVar(&o.SignerNames, "signer-name", o.SignerNames, "A signer to run, with default durations and approval rules (repeatable; default trustsync.io/workload). Not with --policy.")
	fs.StringVar(&o.TrustDomain, "trust-domain", o.TrustDomain, "SPIFFE trust domain for --signer-name signers' approval rules. Not with --policy.")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Requests handled concurrently, CSRs and PodCertificateRequests each.")
	fs.StringVar(&o.HealthAddress, "health-bind-address", o.HealthAddress, "Address serving /healthz, /readyz and /metrics; empty serves none.")
	fs.StringVar(&o.CASecretPrefix, "ca-secret-prefix", o.CASecretPrefix, "Prefix of each signer's CA Secret name; the rest is the signer name with '/' replaced by '-'.")
	fs.DurationVar(&o.CAValidity, "ca-validity", o.CAValidity, "Lifetime of a CA the signer generates.")
	fs.Float64Var(&o.CARotateAt, "ca-rotate-at", o.CARotateAt, "Fraction of a generated CA's lifetime at which its successor is created and published.")
	fs.DurationVar(&o.CAPropagationWindow, "ca-propagation-window", o.CAPropagationWindow, "With --ca-propagation=timed (or where no node reports are served): how long a new CA is published before it signs anything: trust before use.")
	fs.StringVar(&o.CAPropagation, "ca-propagation", o.CAPropagation, "How a new CA waits before it signs: observed (until the nodes' reports show every pod that selects the signer's bundle holding it, or --ca-propagation-max-wait passed; where no reports are served, as timed) or timed (--ca-propagation-window).")
	fs.StringVar(&o.BundleEndpointAddress, "bundle-endpoint-bind-address", o.BundleEndpointAddress, "Address (HOST:PORT) serving each signer's trust domain TD's SPIFFE bundle at https://HOST:PORT/TD (profile https_spiffe: the endpoint presents spiffe://TD/trustsync/bundle-endpoint, issued by the first signer's CA), for other clusters to federate with; empty serves none. Every replica serves it, from the CA Secrets.")
	fs.DurationVar(&o.BundleEndpointRefreshHint, "bundle-endpoint-refresh-hint", o.BundleEndpointRefreshHint, "The refresh hint the bundles carry: how often peers fetch them. With the endpoint on, a new CA waits at least "+fmt.Sprint(peerPolls)+" refresh hints after it is published before it signs, so that peers have it too; keep it well below --ca-propagation-window and --ca-propagation-max-wait.")
	fs.IntVar(&o.BundleEndpointMaxConnections, "bundle-endpoint-max-connections", o.BundleEndpointMaxConnections, "The most connections the bundle endpoint holds at once; more wait in the kernel's backlog until one closes. Each costs about 30 KiB of the signer's memory, so this bounds what the network can make the key holder spend.")
	fs.IntVar(&o.BundleEndpointMaxClientConnections, "bundle-endpoint-max-client-connections", o.BundleEndpointMaxClientConnections, "The most of those connections one client (one source address) holds at once; a connection beyond it is closed at once, so no one client takes every slot. Behind a load balancer that hides clients' addresses (SNAT), every client is the balancer: preserve them (externalTrafficPolicy: Local) or raise this to --bundle-endpoint-max-connections.")
	fs.DurationVar(&o.BundleEndpointIdleTimeout, "bundle-endpoint-idle-timeout", o.BundleEndpointIdleTimeout, "How long the bundle endpoint keeps an idle keep-alive connection; peers fetch once per refresh hint, so a connection is rarely worth keeping longer.")
	fs.DurationVar(&o.CAPropagationMinWait, "ca-propagation-min-wait", o.CAPropagationMinWait, "With --ca-propagation=observed: the least a new CA waits when any consumer of the signer's bundle cannot be observed (a trust object read through env, a truststore whose password is in a Secret) or none is observed at all: seeing nobody is not everybody holding it. The default covers the kubelet's worst refresh of a configMap or secret volume; never more than --ca-propagation-max-wait. 0 is safe only where every consumer is a pod whose trust files the node agents observe.")
	fs.StringVar(&o.InjectedIndex, "injected-index", o.InjectedIndex, "NAMESPACE/NAME of the ConfigMap in which the controller lists the objects annotation injection fills and the anchors each holds (default: $POD_NAMESPACE/"+v1alpha1.InjectedIndexName+"): a rotation waits until those filled from the signer's bundle hold the new CA (caBundle fields included). Empty: they are not counted. Only that ConfigMap is read.")
	fs.BoolVar(&o.TenancyEnforced, "tenancy-enforced", o.TenancyEnforced, "Deny a CSR or PodCertificateRequest from a namespace whose TrustPolicies do not grant the signer, or for a DNS name outside the grant's patterns, naming the grant missing; --namespace is exempt. The TrustPolicies and namespaces are watched, not read per request.")
	fs.DurationVar(&o.CAPropagationMaxWait, "ca-propagation-max-wait", o.CAPropagationMaxWait, "With --ca-propagation=observed: the longest a new CA waits for every pod; then it signs, and a Warning Event on the CA Secret names the pods that were not seen holding it.")
}

// Policy loads the policy file, or builds the one --signer-name and --trust-domain stand
// for. Giving both is an error: the file is the single source of truth.
func (o *Options) Policy(fs *pflag.FlagSet) (*policy.Policy, error) {
	shorthand := fs != nil && (fs.Changed("signer-name") || fs.Changed("trust-domain"))
	if o.PolicyFile != "" {
		if shorthand {
			return nil, errors.New("--policy and --signer-name/--trust-domain exclude each other: put the signers in the policy file")
		}
		return policy.Load(o.PolicyFile)
	}
	names := o.SignerNames
	if len(names) == 0 {
		names = []string{policy.DefaultSignerName}
	}
	return policy.ForSigners(names, o.TrustDomain)
}

// movedFlags went to trustsync-controller with the TrustTarget and injection
// controllers: the pod that holds the CA keys writes nothing cluster-wide.
var movedFlags = []string{"targets", "targets-secrets", "targets-ca-bundles", "targets-kube-api-qps", "targets-kube-api-burst"}

// addMovedFlags registers the moved flags, hidden, so that one given is refused with
// where it went rather than as unknown.
func addMovedFlags(fs *pflag.FlagSet) {
	for _, name := range movedFlags {
		fs.String(name, "", "")
		fs.Lookup(name).NoOptDefVal = "true"
		_ = fs.MarkHidden(name)
	}
}

// Moved refuses a flag that went to trustsync-controller, saying where.
func Moved(fs *pflag.FlagSet) error {
	var errs []error
	for _, name := range movedFlags {
		if fs != nil && fs.Changed(name) {
			errs = append(errs, fmt.Errorf("--%s moved to trustsync-controller, which runs TrustTargets and injection apart from the CA keys (the chart's targets.* values configure it there; its API rate flags are --kube-api-qps and --kube-api-burst): remove it from the signer's arguments", name))
		}
	}
	return errors.Join(errs...)
}

// peerPolls is how many refresh hints a new CA waits, with the bundle endpoint on,
// before it signs: a peer polling at the hint has had that many chances to fetch it
// (one missed or failed fetch is absorbed).
const peerPolls = 3

// PeerWait is the least a new CA waits after it is published when the bundle endpoint
// serves it to peers; zero without an endpoint.
func (o *Options) PeerWait() time.Duration {
	if o.BundleEndpointAddress == "" {
		return 0
	}
	return peerPolls * o.BundleEndpointRefreshHint
}

// Validate reports flag values that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if err := o.Flags.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("--namespace (or $POD_NAMESPACE) is required: it holds the CA Secrets and the Lease"))
	}
	if _, err := v1alpha1.ParseInjectedIndexRef(o.InjectedIndex); err != nil {
		errs = append(errs, err)
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers must be at least 1, not %d", o.Workers))
	}
	if o.CARotateAt <= 0 || o.CARotateAt >= 1 {
		errs = append(errs, fmt.Errorf("--ca-rotate-at must be between 0 and 1 (a fraction of the CA's lifetime), not %v", o.CARotateAt))
	}
	if o.CAValidity < time.Hour {
		errs = append(errs, fmt.Errorf("--ca-validity %s is too short; use at least an hour", o.CAValidity))
	}
	if o.CAPropagation != string(PropagationObserved) && o.CAPropagation != string(PropagationTimed) {
		errs = append(errs, fmt.Errorf("--ca-propagation %q is not supported: give %s or %s", o.CAPropagation, PropagationObserved, PropagationTimed))
	}
	if o.CAPropagationMaxWait <= 0 {
		errs = append(errs, fmt.Errorf("--ca-propagation-max-wait %s must be positive", o.CAPropagationMaxWait))
	}
	if o.CAPropagationMinWait < 0 {
		errs = append(errs, fmt.Errorf("--ca-propagation-min-wait %s must not be negative", o.CAPropagationMinWait))
	}
	if o.BundleEndpointAddress != "" {
		if o.BundleEndpointRefreshHint < time.Second {
			errs = append(errs, fmt.Errorf("--bundle-endpoint-refresh-hint %s is too short; peers fetch at most once a second", o.BundleEndpointRefreshHint))
		}
		if o.BundleEndpointMaxConnections < 1 {
			errs = append(errs, fmt.Errorf("--bundle-endpoint-max-connections must be at least 1, not %d", o.BundleEndpointMaxConnections))
		}
		if o.BundleEndpointMaxClientConnections < 1 || o.BundleEndpointMaxClientConnections > o.BundleEndpointMaxConnections {
			errs = append(errs, fmt.Errorf("--bundle-endpoint-max-client-connections must be between 1 and --bundle-endpoint-max-connections (%d), not %d", o.BundleEndpointMaxConnections, o.BundleEndpointMaxClientConnections))
		}
		if o.BundleEndpointIdleTimeout <= 0 {
			errs = append(errs, fmt.Errorf("--bundle-endpoint-idle-timeout %s must be positive: an idle connection is never kept forever", o.BundleEndpointIdleTimeout))
		}
		longest := o.CAPropagationWindow
		if o.CAPropagation == string(PropagationObserved) {
			longest = o.CAPropagationMaxWait
		}
		if floor := o.PeerWait(); floor > longest {
			errs = append(errs, fmt.Errorf("a new CA waits %d refresh hints (%s) for peers to fetch it, longer than the rotation's longest wait %s: lower --bundle-endpoint-refresh-hint or raise the wait", peerPolls, floor, longest))
		}
	}
	return errors.Join(errs...)
}
