// Command trustsync-sidecar keeps a pod's trust files current.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/trustsync/trustsync/buildinfo"
	"github.com/trustsync/trustsync/cmd/internal/cli"
	"github.com/trustsync/trustsync/sidecar"
)

const about = `trustsync-sidecar: keeps a merged, deduplicated trust bundle file current inside a pod.

Subcommands:
  run     watch the sources and rewrite the files atomically on every change (the native
          sidecar, or legacy mode's regular container)
  init    write every file once and exit; a required file that cannot be written exits
          non-zero with the reason in the termination log (legacy mode's init container)
  probe   exit 0 only when every required file exists and is not empty (the startup probe)

The trustsync webhook injects it with these flags; see docs/sidecar.md.`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintf(os.Stderr, "%s\n\nUsage:\n  trustsync-sidecar run|init|probe [flags]\n  trustsync-sidecar SUBCOMMAND --help\n", about)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "-h", "--help", "help":
		fmt.Fprintf(os.Stdout, "%s\n\nUsage:\n  trustsync-sidecar run|init|probe [flags]\n  trustsync-sidecar SUBCOMMAND --help\n  trustsync-sidecar --version\n", about)
		os.Exit(0)
	case "--version", "version":
		fmt.Fprintf(os.Stdout, "trustsync-sidecar %s\n%s\n", buildinfo.String(), buildinfo.FIPSLine())
		os.Exit(0)
	}
	sub := os.Args[1]
	opts := sidecar.NewOptions()
	fs := pflag.NewFlagSet("trustsync-sidecar "+sub, pflag.ContinueOnError)
	opts.AddFlags(fs)
	switch sub {
	case "run":
		cli.Parse(fs, about, os.Args[2:])
		cli.Exit(sidecar.Run(cli.SignalContext(), opts))
	case "init":
		cli.Parse(fs, about, os.Args[2:])
		cli.Exit(sidecar.Init(cli.SignalContext(), opts))
	case "probe":
		cli.Parse(fs, about, os.Args[2:])
		if err := sidecar.Probe(opts); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "trustsync-sidecar: unknown subcommand %q; use run, init or probe\n", sub)
		os.Exit(2)
	}
}
