// Command trustsync-signer is trustsync's in-cluster signer.
package main

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/trustsync/trustsync/cmd/internal/lease"
	"github.com/trustsync/trustsync/signer"
)

const about = `trustsync-signer: issues certificates for approved CertificateSigningRequests and publishes
its CA as a trust bundle.

For each signer of its policy it approves the CSRs the approval rules allow (a
ServiceAccount asking for its own SPIFFE identity), signs approved CSRs honouring the
requested duration within the policy, keeps its CA in a Secret, rotates it trust before
use, and keeps a ClusterTrustBundle named <signer>:live holding its current anchors.
Only the holder of the Lease acts. See docs/signer.md.`

func main() {
	opts := signer.NewOptions()
	lease.Run("trustsync-signer", about, signer.LeaderElectUsage, opts.AddFlags, func(ctx context.Context, fs *pflag.FlagSet, campaign lease.Campaign) error {
		return signer.Run(ctx, opts, fs, campaign)
	})
}
