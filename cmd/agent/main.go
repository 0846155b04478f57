// Command trustsync-agent is trustsync's node agent: a CSI driver that delivers trust
// files (and workload certificates) to every pod on its node.
package main

import (
	"os"

	"github.com/spf13/pflag"

	"github.com/trustsync/trustsync/agent"
	"github.com/trustsync/trustsync/cmd/internal/cli"
)

const about = `trustsync-agent: trustsync's node agent, the CSI driver csi.trustsync.io.

Pods with trustsync.io/delivery: node get a CSI inline volume instead of a sidecar;
the agent on their node writes into it everything the sidecar would (merged trust
files, truststores, a rotating workload certificate) over one set of watches per node,
reading what is not public with each pod's own ServiceAccount token. The chart runs
it as a DaemonSet; see docs/agent.md.`

func main() {
	opts := agent.NewOptions()
	fs := pflag.NewFlagSet("trustsync-agent", pflag.ContinueOnError)
	opts.AddFlags(fs)
	cli.Parse(fs, about, os.Args[1:])
	cli.Exit(agent.Run(cli.SignalContext(), opts))
}
