// Command trustsync-webhook is trustsync's admission webhook: validates trust bundles and certificate signing requests and injects the trust-sync sidecar.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
)

func main() {
	fs := pflag.NewFlagSet("trustsync-webhook", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "trustsync-webhook: the %s.\n\nThis release builds the binary but does not implement it yet.\n\nUsage:\n  trustsync-webhook [flags]\n\nFlags:\n%s", "admission webhook: validates trust bundles and certificate signing requests and injects the trust-sync sidecar", fs.FlagUsages())
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == pflag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, "trustsync-webhook is not implemented yet; see --help")
	os.Exit(1)
}
