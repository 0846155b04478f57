// Package controller is trustsync-controller: the TrustTarget controller, the
// injection of bundles into annotated objects (ConfigMaps, Secrets where allowed, and
// caBundle fields), and the import of federated trust domains. It holds no key: the component that reads what tenants write
// (annotations, TrustTargets) is not the one that can sign.
package controller

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/kubeapi/clientflags"
)

// LeaseName is the controllers' leader-election Lease, apart from the signer's.
const LeaseName = "trustsync-controller"

// LeaderElectUsage is the --leader-elect flag's help.
const LeaderElectUsage = "Elect one active controller with a Lease (" + LeaseName + " in --namespace): with more than one replica, only the holder writes."

// Options are the controller's flags.
type Options struct {
	clientflags.Flags
	Namespace     string
	HealthAddress string
	// Targets runs the TrustTarget controller; Secrets lets it (and the injection)
	// write Secrets; CABundles fills annotated webhook configurations, APIServices
	// and CRDs.
	Targets   bool
	Secrets   bool
	CABundles bool
	// SecretNames, with Secrets, are the only Secret names it may read and write
	// (in every namespace); none: every Secret.
	SecretNames []string
	// Federation imports the peers' bundles FederatedTrustDomains name; with
	// FleetNamespace, it also keeps one per ClusterProfile of that namespace carrying
	// a trustsync bundle endpoint, except this cluster's (OwnTrustDomains).
	Federation      bool
	FleetNamespace  string
	OwnTrustDomains []string
	// InjectedIndex is NAMESPACE/NAME of the ConfigMap listing the annotated objects
	// filled, for the node agents and the signer; empty publishes none.
	InjectedIndex string
	// SidecarEventsClusterRole, when set, is the ClusterRole bound in every namespace
	// the injector serves to that namespace's ServiceAccounts (sidecarevents).
	SidecarEventsClusterRole string
	// TenancyEnforced writes a TrustTarget only into the namespaces granted every
	// source, and an annotated object only with the sources its namespace is
	// granted; Namespace is exempt.
	TenancyEnforced bool
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	ns := os.Getenv("POD_NAMESPACE")
	return &Options{Namespace: ns, HealthAddress: ":8081", Targets: true, CABundles: true, Federation: true, Flags: clientflags.Flags{QPS: 100, Burst: 200},
		InjectedIndex: v1alpha1.DefaultInjectedIndex(ns)}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Flags.AddFlags(fs, "the controller's ServiceAccount", "a bundle edit is one write per object whose content changes")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the leader-election Lease (default: $POD_NAMESPACE).")
	fs.StringVar(&o.HealthAddress, "health-bind-address", o.HealthAddress, "Address serving /healthz, /readyz and /metrics; empty serves none.")
	fs.BoolVar(&o.Targets, "targets", o.Targets, "Keep every TrustTarget's ConfigMaps (or Secrets) current in the namespaces it selects (where the TrustTarget CRD is served). ConfigMaps annotated trustsync.io/inject: \"true\" are filled either way.")
	fs.StringSliceVar(&o.SecretNames, "targets-secret-names", o.SecretNames, "With --targets-secrets: the only Secret names TrustTargets and annotations may write, in any namespace (comma-separated); the controller then reads and watches Secrets of these names alone, which RBAC can grant by resourceNames (the chart's targets.authorizedSecrets). Empty: every Secret.")
	fs.BoolVar(&o.Secrets, "targets-secrets", o.Secrets, "Allow TrustTargets and annotations to write Secrets. Writing Secrets in every namespace also means reading them: grant it (the chart's targets.secrets) only where that is acceptable.")
	fs.BoolVar(&o.CABundles, "targets-ca-bundles", o.CABundles, "Fill the caBundle fields of webhook configurations, APIServices and CRDs (conversion webhooks) annotated trustsync.io/inject: \"true\" with the PEM their annotations name.")
	fs.BoolVar(&o.Federation, "federation", o.Federation, "Import the bundles of the peer trust domains FederatedTrustDomains name (where their CRD is served) into ClusterTrustBundles of signer trustsync.io/federated.")
	fs.StringVar(&o.FleetNamespace, "fleet-cluster-profile-namespace", o.FleetNamespace, "Join the fleet whose ClusterProfiles (multicluster.x-k8s.io, the cluster inventory API) are in this namespace: one FederatedTrustDomain per profile whose status properties carry trustsync.io/trust-domain and trustsync.io/bundle-endpoint-url, removed when the profile goes. Empty: no fleet.")
	fs.StringSliceVar(&o.OwnTrustDomains, "fleet-own-trust-domains", o.OwnTrustDomains, "This cluster's own trust domains: the fleet's profiles naming one are this cluster, and are not imported.")
	fs.StringVar(&o.SidecarEventsClusterRole, "sidecar-events-cluster-role", o.SidecarEventsClusterRole, "A ClusterRole letting sidecars record Events; when set, every namespace the injector serves gets a RoleBinding of that name binding it to the namespace's own ServiceAccounts (group system:serviceaccounts:<namespace>), so a sidecar may write Events in its own namespace only. Empty: none are kept.")
	fs.BoolVar(&o.TenancyEnforced, "tenancy-enforced", o.TenancyEnforced, "Write a TrustTarget only into the namespaces its TrustPolicies grant every one of its sources (status.notGrantedNamespaces names the rest), and fill an annotated ConfigMap or Secret only with the sources its namespace is granted (a Warning Event, TrustInjectNotGranted, names the rest); a grant withdrawn takes what was written away. --namespace is exempt. TrustPolicy statuses are written either way.")
	fs.StringVar(&o.InjectedIndex, "injected-index", o.InjectedIndex, "NAMESPACE/NAME of the ConfigMap listing the objects annotation injection fills and the anchors each holds, from which the node agents observe the pods reading them and the signer's rotations count them (default: $POD_NAMESPACE/"+v1alpha1.InjectedIndexName+"). Empty publishes none: those objects' readers go unobserved.")
}

// Validate reports flag values that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("--namespace (or $POD_NAMESPACE) is required: it holds the Lease"))
	}
	if _, err := v1alpha1.ParseInjectedIndexRef(o.InjectedIndex); err != nil {
		errs = append(errs, err)
	}
	if len(o.SecretNames) > 0 && !o.Secrets {
		errs = append(errs, fmt.Errorf("--targets-secret-names %s narrows the Secrets --targets-secrets allows: give --targets-secrets too", strings.Join(o.SecretNames, ",")))
	}
	for _, n := range o.SecretNames {
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--targets-secret-names: %q is not a Secret's name: %s", n, strings.Join(msgs, "; ")))
		}
	}
	if err := o.Flags.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
