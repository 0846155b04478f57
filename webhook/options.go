package webhook

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/kubeapi/clientflags"
)

// Options configure the webhook server. cmd/webhook fills them from flags.
type Options struct {
	BindAddress       string
	SecurePort        int
	TLSCertFile       string
	TLSPrivateKeyFile string
	clientflags.Flags
	PolicyFile string
	// Self-managed TLS.
	SelfManagedTLS           bool
	TLSSecretName            string
	ServiceName              string
	WebhookConfigurationName string

	// Injection.
	SidecarImage           string
	SidecarImagePullPolicy string
	// SidecarImagePullSecrets are added to injected sidecar pods that lack them.
	SidecarImagePullSecrets []string
	DefaultSidecarMode      string
	Namespace               string
	// movedSidecarEventsRole is --sidecar-events-cluster-role, which moved to
	// trustsync-controller; given, it is refused, saying where.
	movedSidecarEventsRole string
	// TenancyEnforced refuses pods asking for trust their namespace's TrustPolicies
	// do not grant (Namespace is exempt).
	TenancyEnforced bool

	// ShutdownGracePeriod is how long in-flight reviews may take to finish after
	// SIGTERM before the server closes their connections.
	ShutdownGracePeriod time.Duration
	// ShutdownDelay is how long the server keeps accepting reviews after SIGTERM, with
	// /readyz failing, so the API server stops sending before the listener closes.
	ShutdownDelay time.Duration
	// ReviewBytesInFlight bounds the admission review bytes held at once.
	ReviewBytesInFlight int64
	// HealthAddress serves /healthz and /readyz over plain HTTP from the first moment,
	// so probes work while the serving certificate is still being obtained; empty
	// turns it off. The same flag as every trustsync binary's.
	HealthAddress string
	// healthPort is the deprecated --health-port (-1: not given).
	healthPort int
}

// HealthBindAddress is where /healthz and /readyz are served ("" for nowhere): the
// deprecated --health-port, where given, on --bind-address.
func (o *Options) HealthBindAddress() string {
	switch {
	case o.healthPort < 0:
		return o.HealthAddress
	case o.healthPort == 0:
		return ""
	}
	return net.JoinHostPort(o.BindAddress, strconv.Itoa(o.healthPort))
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		BindAddress: "0.0.0.0",
		// The port GKE's private clusters (and cert-manager's webhook) expect: their
		// control plane reaches nodes on 443 and 10250 alone.
		SecurePort:               10250,
		Flags:                    clientflags.Flags{QPS: 20, Burst: 30},
		ShutdownGracePeriod:      15 * time.Second,
		ShutdownDelay:            5 * time.Second,
		ReviewBytesInFlight:      DefaultReviewBytesInFlight,
		HealthAddress:            ":8081",
		healthPort:               -1,
		SidecarImage:             injector.DefaultImage,
		TLSSecretName:            "trustsync-webhook-tls",
		ServiceName:              "trustsync-webhook",
		WebhookConfigurationName: "trustsync",
		SidecarImagePullPolicy:   string(corev1.PullIfNotPresent),
		DefaultSidecarMode:       string(v1alpha1.ModeRestartableInit),
		Namespace:                os.Getenv("POD_NAMESPACE"),
	}
}

// LeaderElectUsage is --leader-elect's meaning in the webhook; cmd/webhook registers
// the leader-election flags, shared with the signer.
const LeaderElectUsage = "With --self-managed-tls: only the replica holding the Lease named after --tls-secret-name creates and renews the Secret and sets caBundle; the others serve the Secret's certificate. Without it every replica does, and the Secret's resourceVersion settles races."

// AddFlags registers the options' flags, named as Kubernetes components name them.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "The IP address on which to serve HTTPS.")
	fs.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "The port on which to serve HTTPS: admission reviews, /healthz, /readyz and /metrics.")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "File containing the serving certificate (PEM, leaf first, then intermediates). Reloaded when it changes, without a restart. Not with --self-managed-tls.")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", o.TLSPrivateKeyFile, "File containing the serving certificate's private key (PEM). Reloaded together with --tls-cert-file.")
	fs.BoolVar(&o.SelfManagedTLS, "self-managed-tls", o.SelfManagedTLS, "Generate and renew the serving certificate (and its CA) in a Secret, and set that CA in the webhook configurations: nothing else to install. Without it, serve --tls-cert-file and --tls-private-key-file (from cert-manager, say).")
	fs.StringVar(&o.TLSSecretName, "tls-secret-name", o.TLSSecretName, "With --self-managed-tls: the Secret in --namespace holding the CA and serving certificate.")
	fs.StringVar(&o.ServiceName, "service-name", o.ServiceName, "With --self-managed-tls: the webhook's Service, whose DNS names the serving certificate carries.")
	fs.StringVar(&o.WebhookConfigurationName, "webhook-configuration-name", o.WebhookConfigurationName, "With --self-managed-tls: the name of the ValidatingWebhookConfiguration and MutatingWebhookConfiguration whose caBundle the webhook keeps.")
	o.Flags.AddFlags(fs, "the webhook's ServiceAccount", "")
	fs.StringVar(&o.PolicyFile, "policy", o.PolicyFile, "Path to the trustsync policy file (signers' duration rules, bundle expiry warnings). Empty means: only the 600-second minimum, and warnings for anchors expiring within 30 days.")
	fs.StringVar(&o.SidecarImage, "sidecar-image", o.SidecarImage, "Image of the trust-sync sidecar injected into pods (it holds /trustsync-sidecar).")
	fs.StringVar(&o.SidecarImagePullPolicy, "sidecar-image-pull-policy", o.SidecarImagePullPolicy, "Pull policy of the injected sidecar: Always, IfNotPresent or Never.")
	fs.StringSliceVar(&o.SidecarImagePullSecrets, "sidecar-image-pull-secrets", o.SidecarImagePullSecrets, "Names of Secrets, in each pod's own namespace, to pull the sidecar image with; added to a sidecar pod's imagePullSecrets where it does not list them (comma-separated, or the flag repeated).")
	fs.StringVar(&o.DefaultSidecarMode, "default-sidecar-mode", o.DefaultSidecarMode, "How the sidecar runs when a pod does not say (trustsync.io/sidecar-mode): native (an init container with restartPolicy Always; Kubernetes 1.29+) or legacy (an init container plus a regular container).")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "The webhook's own namespace, whose pods are never injected (default: $POD_NAMESPACE).")
	fs.BoolVar(&o.TenancyEnforced, "tenancy-enforced", o.TenancyEnforced, "Refuse a pod that asks for a bundle or a signer its namespace's TrustPolicies do not grant, whichever way it asks (trustsync annotations, projected clusterTrustBundle or podCertificate volumes, inline csi.trustsync.io volumes); --namespace is exempt. The TrustPolicies and namespaces are watched, not read per review.")
	fs.StringVar(&o.movedSidecarEventsRole, "sidecar-events-cluster-role", "", "Moved to trustsync-controller.")
	_ = fs.MarkHidden("sidecar-events-cluster-role")
	fs.DurationVar(&o.ShutdownGracePeriod, "shutdown-grace-period", o.ShutdownGracePeriod, "How long in-flight admission reviews may take to finish once the server stops accepting them.")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay", o.ShutdownDelay, "How long to keep accepting admission reviews after SIGTERM, with /readyz failing, so the API server has stopped sending to this replica before it stops listening (as kube-apiserver's --shutdown-delay-duration).")
	fs.Int64Var(&o.ReviewBytesInFlight, "max-review-bytes-in-flight", o.ReviewBytesInFlight, "The admission review bytes decoded at once; a review whose body is in waits for room, so memory stays bounded however many arrive together (bodies still arriving are bounded at twice this, charged by the bytes they sent). A review costs about five times its size while decoded; at least 6291456 (one review of the largest size).")
	fs.StringVar(&o.HealthAddress, "health-bind-address", o.HealthAddress, "Address serving /healthz, /readyz and /metrics over plain HTTP, open from start-up, for probes and scrapers; empty serves none.")
	fs.IntVar(&o.healthPort, "health-port", o.healthPort, "")
	_ = fs.MarkDeprecated("health-port", "use --health-bind-address HOST:PORT (empty serves none), the flag every trustsync binary takes")
}

// Validate reports flag combinations that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if o.movedSidecarEventsRole != "" {
		errs = append(errs, errors.New("--sidecar-events-cluster-role moved to trustsync-controller, so that the webhook, which any pod can reach, holds no right to create RoleBindings (the chart's sidecarRBAC.events sets it there): remove it from the webhook's arguments"))
	}
	if err := o.Flags.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch {
	case o.SelfManagedTLS && (o.TLSCertFile != "" || o.TLSPrivateKeyFile != ""):
		errs = append(errs, errors.New("--self-managed-tls and --tls-cert-file/--tls-private-key-file exclude each other"))
	case o.SelfManagedTLS && o.Namespace == "":
		errs = append(errs, errors.New("--self-managed-tls needs --namespace (or $POD_NAMESPACE): it keeps its Secret there"))
	case !o.SelfManagedTLS && (o.TLSCertFile == "" || o.TLSPrivateKeyFile == ""):
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file are required (or --self-managed-tls): the API server only calls webhooks over HTTPS"))
	}
	switch corev1.PullPolicy(o.SidecarImagePullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs = append(errs, fmt.Errorf("--sidecar-image-pull-policy %q is not one of Always, IfNotPresent, Never", o.SidecarImagePullPolicy))
	}
	for _, name := range o.SidecarImagePullSecrets {
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--sidecar-image-pull-secrets: %q is not a Secret name: %s", name, strings.Join(msgs, "; ")))
		}
	}
	if m := v1alpha1.Mode(o.DefaultSidecarMode); m != v1alpha1.ModeRestartableInit && m != v1alpha1.ModeLegacy {
		errs = append(errs, fmt.Errorf("--default-sidecar-mode %q is not one of native, legacy", o.DefaultSidecarMode))
	}
	if o.SecurePort <= 0 || o.SecurePort > 65535 {
		errs = append(errs, errors.New("--secure-port must be between 1 and 65535"))
	}
	if o.ReviewBytesInFlight < MaxReviewBytes {
		errs = append(errs, fmt.Errorf("--max-review-bytes-in-flight %d is below %d, the largest review accepted, which could then never be served", o.ReviewBytesInFlight, MaxReviewBytes))
	}
	return errors.Join(errs...)
}
