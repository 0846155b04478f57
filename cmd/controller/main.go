// Command trustsync-controller keeps trust where pods are not: TrustTargets and
// objects annotated to ask for it, and peer trust domains' bundles.
package main

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/trustsync/trustsync/cmd/internal/lease"
	"github.com/trustsync/trustsync/controller"
)

const about = `trustsync-controller: keeps bundles where pods are not.

It writes every TrustTarget's sources as a ConfigMap (or Secret) into each namespace
the target selects, and fills objects annotated trustsync.io/inject: "true" (ConfigMaps,
Secrets where allowed, and the caBundle fields of webhook configurations, APIServices
and CRDs) with the bundles their annotations name, and imports the bundles of the
peer trust domains FederatedTrustDomains name from their SPIFFE bundle endpoints
(into ClusterTrustBundles of signer trustsync.io/federated), keeping all of them
current. It holds no key and reads no Secret it does not write. Only the holder of the Lease acts.
See docs/targets.md and docs/federation.md.`

func main() {
	opts := controller.NewOptions()
	lease.Run("trustsync-controller", about, controller.LeaderElectUsage, opts.AddFlags, func(ctx context.Context, _ *pflag.FlagSet, campaign lease.Campaign) error {
		return controller.Run(ctx, opts, campaign)
	})
}
