package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/kubeapi/clientflags"
)

// Options are the agent's command line.
type Options struct {
	NodeName string
	// Endpoint is the CSI socket, as the agent's container sees it.
	Endpoint string
	// RegistrationDir is the kubelet's plugins_registry directory as the agent sees
	// it; "" registers nothing (the agent run without a kubelet, in tests).
	RegistrationDir string
	// KubeletEndpoint is the CSI socket as the kubelet sees it, on the node.
	KubeletEndpoint string
	DataDir         string
	// DataDirTmpfs mounts a tmpfs at DataDir unless one is there: the volumes' files
	// and keys live in memory, never on the node's disk.
	DataDirTmpfs  bool
	DataDirSize   string
	TokenAudience string
	clientflags.Flags
	HealthAddress    string
	DiscoveryEvery   time.Duration
	FirstSyncTimeout time.Duration
	ReapEvery        time.Duration
	// PodsDir is the kubelet's pods directory, as the agent sees it: where it reads
	// what the node's pods hold. "" observes nothing.
	PodsDir string
	// InjectedIndex is NAMESPACE/NAME of the controller's index of annotated
	// objects: the pods mounting those are observed too. Empty: they are not.
	InjectedIndex string
	// TenancyEnforced refuses to mount what the pod's namespace is not granted, and
	// leaves out of running volumes any bundle no longer granted; Namespace (the
	// agent's own, from $POD_NAMESPACE) is exempt.
	TenancyEnforced bool
	Namespace       string
	ObserveEvery    time.Duration
	ReportInterval  time.Duration
	ReportHeartbeat time.Duration
	// ExpiryWarningDays: a Warning Event on each observed pod that trusts an anchor
	// expiring this soon; 0 for none.
	ExpiryWarningDays int
}

// NewOptions returns the defaults, with the node's name from $NODE_NAME.
func NewOptions() *Options {
	return &Options{
		NodeName:         os.Getenv("NODE_NAME"),
		Namespace:        os.Getenv("POD_NAMESPACE"),
		Endpoint:         "unix:///csi/csi.sock",
		RegistrationDir:  "/registration",
		KubeletEndpoint:  "/var/lib/kubelet/plugins/" + DriverName + "/csi.sock",
		DataDir:          "/var/run/trustsync-agent",
		DataDirTmpfs:     true,
		DataDirSize:      "256Mi",
		Flags:            clientflags.Flags{QPS: 50, Burst: 100},
		HealthAddress:    ":9809",
		DiscoveryEvery:   5 * time.Minute,
		FirstSyncTimeout: 30 * time.Second,
		ReapEvery:        time.Minute,
		PodsDir:          "/var/lib/kubelet/pods",
		ObserveEvery:     500 * time.Millisecond,
		ReportInterval:   2 * time.Second,
		ReportHeartbeat:  5 * time.Minute,

		ExpiryWarningDays: contract.DefaultExpiryWarningDays,
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "The node this agent serves (default: $NODE_NAME, from the downward API). Publish requests for pods on other nodes are refused.")
	fs.StringVar(&o.Endpoint, "endpoint", o.Endpoint, "The CSI socket to serve, as this container sees it.")
	fs.StringVar(&o.RegistrationDir, "registration-dir", o.RegistrationDir, "The kubelet's plugins_registry directory, as this container sees it: the agent registers its CSI driver there. Empty registers nothing (running without a kubelet).")
	fs.StringVar(&o.KubeletEndpoint, "kubelet-registration-path", o.KubeletEndpoint, "The CSI socket as the kubelet sees it, on the node: what the registration tells the kubelet.")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "Where the volumes' files, pending keys and records are kept, on the node (a hostPath, so that a restarted agent finds them). Every volume is a directory here, bind-mounted read-only into its pod.")
	fs.BoolVar(&o.DataDirTmpfs, "data-dir-tmpfs", o.DataDirTmpfs, "Mount a tmpfs at --data-dir unless one is there already, so that trust files and keys are kept in memory and never reach the node's disk.")
	fs.StringVar(&o.DataDirSize, "data-dir-size", o.DataDirSize, "The size of that tmpfs: the most the volumes of this node may hold together (memory is used only as files are written).")
	fs.StringVar(&o.TokenAudience, "token-audience", o.TokenAudience, "The audience of the pod ServiceAccount token the kubelet passes with each publish (the CSIDriver's tokenRequests). ConfigMaps, Secrets and certificates are read and requested with it; empty is the API server's own audience.")
	o.Flags.AddFlags(fs, "the agent's ServiceAccount", "for the agent's own requests")
	fs.StringVar(&o.HealthAddress, "health-bind-address", o.HealthAddress, "Address serving /healthz, /readyz and /metrics; empty serves none.")
	fs.DurationVar(&o.DiscoveryEvery, "api-discovery-interval", o.DiscoveryEvery, "How often to ask whether a bundle API not watched yet is served now. 0 asks only at start.")
	fs.DurationVar(&o.FirstSyncTimeout, "first-sync-timeout", o.FirstSyncTimeout, "How long a publish waits for a new volume's sources and certificate before failing with the reason, which the kubelet shows on the pod and retries.")
	fs.DurationVar(&o.ReapEvery, "reap-interval", o.ReapEvery, "How often to look for volumes whose pods are gone without the kubelet having unpublished them.")
	fs.StringVar(&o.PodsDir, "pods-dir", o.PodsDir, "The kubelet's pods directory, as this container sees it: the agent reads the trust files of the node's pods there (whichever delivery wrote them, trust files alone) and reports what each holds in the node's NodeTrustReport. Empty observes and reports nothing.")
	fs.StringVar(&o.InjectedIndex, "injected-index", o.InjectedIndex, "NAMESPACE/NAME of the ConfigMap in which the controller lists the ConfigMaps and Secrets annotation injection fills (the chart's: RELEASE-NAMESPACE/"+v1alpha1.InjectedIndexName+"): pods mounting those are observed like those mounting a TrustTarget's. Empty: they are not. Only that ConfigMap is read.")
	fs.BoolVar(&o.TenancyEnforced, "tenancy-enforced", o.TenancyEnforced, "Fail the mount of a volume asking for a bundle or a signer its pod's namespace's TrustPolicies do not grant (the webhook's failure policy may have let the pod through), and leave out of every running volume, at its next sync, a bundle its namespace is no longer granted (a policy edited or deleted, a bundle relabelled). --namespace is exempt. The TrustPolicies, namespaces and bundles' labels are watched.")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "The agent's own namespace (default: $POD_NAMESPACE), exempt from --tenancy-enforced.")
	fs.DurationVar(&o.ObserveEvery, "observe-interval", o.ObserveEvery, "How often to look at the node's trust files for a change. Only a file whose inode, size or modification time changed is read again.")
	fs.DurationVar(&o.ReportInterval, "report-interval", o.ReportInterval, "The least time between two writes of the node's NodeTrustReport: changes within it are written together.")
	fs.DurationVar(&o.ReportHeartbeat, "report-heartbeat", o.ReportHeartbeat, "Write the report at least this often even when nothing changed, so that its updatedAt tells a running agent from a stopped one.")
	fs.IntVar(&o.ExpiryWarningDays, "expiry-warning-days", o.ExpiryWarningDays, "With --pods-dir: record a Warning Event (TrustAnchorExpiring, at most once a day per anchor) on each pod whose trust files, whichever delivery wrote them, hold an anchor expiring within this many days. 0 for none. The chart passes the policy's bundles.expiryWarningDays.")
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if err := o.Flags.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.ExpiryWarningDays < 0 {
		errs = append(errs, fmt.Errorf("--expiry-warning-days %d is negative; use 0 for no warnings", o.ExpiryWarningDays))
	}
	if o.NodeName == "" {
		errs = append(errs, errors.New("--node-name (or $NODE_NAME) is required: the agent serves one node's pods"))
	}
	if !filepath.IsAbs(o.DataDir) {
		errs = append(errs, fmt.Errorf("--data-dir %q must be an absolute path", o.DataDir))
	}
	if q, err := resource.ParseQuantity(o.DataDirSize); err != nil || q.Sign() <= 0 {
		errs = append(errs, fmt.Errorf("--data-dir-size %q must be a positive quantity such as 256Mi", o.DataDirSize))
	}
	if o.RegistrationDir != "" && !filepath.IsAbs(o.KubeletEndpoint) {
		errs = append(errs, fmt.Errorf("--kubelet-registration-path %q must be an absolute path", o.KubeletEndpoint))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"api-discovery-interval", o.DiscoveryEvery}, {"first-sync-timeout", o.FirstSyncTimeout}, {"reap-interval", o.ReapEvery}, {"observe-interval", o.ObserveEvery}, {"report-interval", o.ReportInterval}, {"report-heartbeat", o.ReportHeartbeat}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("--%s %s is negative", d.flag, d.v))
		}
	}
	if _, err := v1alpha1.ParseInjectedIndexRef(o.InjectedIndex); err != nil {
		errs = append(errs, err)
	}
	if o.PodsDir != "" && !filepath.IsAbs(o.PodsDir) {
		errs = append(errs, fmt.Errorf("--pods-dir %q must be an absolute path", o.PodsDir))
	}
	if o.PodsDir != "" && (o.ObserveEvery == 0 || o.ReportHeartbeat == 0) {
		errs = append(errs, errors.New("--observe-interval and --report-heartbeat must be positive while --pods-dir is set"))
	}
	if o.TenancyEnforced && o.Namespace == "" {
		errs = append(errs, errors.New("--tenancy-enforced needs --namespace (or $POD_NAMESPACE): the agent's own namespace is exempt"))
	}
	if o.FirstSyncTimeout == 0 || o.ReapEvery == 0 {
		errs = append(errs, errors.New("--first-sync-timeout and --reap-interval must be positive"))
	}
	return errors.Join(errs...)
}
