// Command trustsync-signer is trustsync's in-cluster signer: issues certificates for approved requests and publishes its CA as a trust bundle.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
)

func main() {
	fs := pflag.NewFlagSet("trustsync-signer", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "trustsync-signer: the %s.\n\nThis release builds the binary but does not implement it yet.\n\nUsage:\n  trustsync-signer [flags]\n\nFlags:\n%s", "in-cluster signer: issues certificates for approved requests and publishes its CA as a trust bundle", fs.FlagUsages())
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == pflag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, "trustsync-signer is not implemented yet; see --help")
	os.Exit(1)
}
