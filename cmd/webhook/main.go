// Command trustsync-webhook is trustsync's admission webhook.
package main

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/trustsync/trustsync/cmd/internal/lease"
	"github.com/trustsync/trustsync/webhook"
)

const about = `trustsync-webhook: trustsync's admission webhook.

It validates trust bundles (ClusterTrustBundles of the native certificates.k8s.io kind and
of trustsync's mirror CRD: upstream's rules, the attest permission, expiry warnings) and
certificate signing requests (per-signer duration rules from the policy file), and injects
the trust-sync sidecar into pods annotated trustsync.io/inject: "true", over HTTPS.

Routes: /validate/clustertrustbundles, /validate/certificatesigningrequests,
/mutate/certificatesigningrequests, /mutate/pods, /healthz, /readyz, /metrics.`

func main() {
	opts := webhook.NewOptions()
	lease.Run("trustsync-webhook", about, webhook.LeaderElectUsage, opts.AddFlags, func(ctx context.Context, _ *pflag.FlagSet, campaign lease.Campaign) error {
		return webhook.Run(ctx, opts, campaign)
	})
}
