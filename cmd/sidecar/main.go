// Command trustsync-sidecar is trustsync's trust-sync sidecar: keeps a merged, deduplicated trust bundle file current inside a pod.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
)

func main() {
	fs := pflag.NewFlagSet("trustsync-sidecar", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "trustsync-sidecar: the %s.\n\nThis release builds the binary but does not implement it yet.\n\nUsage:\n  trustsync-sidecar [flags]\n\nFlags:\n%s", "trust-sync sidecar: keeps a merged, deduplicated trust bundle file current inside a pod", fs.FlagUsages())
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == pflag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, "trustsync-sidecar is not implemented yet; see --help")
	os.Exit(1)
}
