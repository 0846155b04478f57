// Package cli holds what every trustsync binary does the same way: flag parsing with
// klog's flags (-v and friends), --help, and a context that ends on SIGTERM or SIGINT.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/cmd/internal/version"
)

// Parse parses args into fs (after adding klog's flags and --version), printing usage
// on standard output for --help and the release for --version. It exits 0 for those
// and 2 for a bad flag (with the usage hint on standard error), as Kubernetes
// components do.
func Parse(fs *pflag.FlagSet, about string, args []string) {
	showVersion := fs.Bool("version", false, "Print the release and exit.")
	// Only the verbosity flags: klog's file-output flags are deprecated, and logs go to
	// stderr as containers expect.
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	for _, name := range []string{"v", "vmodule"} {
		fs.AddGoFlag(klogFlags.Lookup(name))
	}
	fs.Usage = func() {
		fmt.Fprintf(os.Stdout, "%s\n\nUsage:\n  %s [flags]\n\nFlags:\n%s", about, fs.Name(), fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "%s: %v\nRun '%s --help' for usage.\n", fs.Name(), err, fs.Name())
		os.Exit(2)
	}
	if *showVersion {
		fmt.Fprintf(os.Stdout, "%s %s\n", strings.Fields(fs.Name())[0], version.String())
		os.Exit(0)
	}
}

// SignalContext returns a context that ends on SIGTERM (what the kubelet sends) or
// SIGINT. A second signal exits at once.
func SignalContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
	go func() {
		sig := <-ch
		klog.InfoS("Received signal, shutting down", "signal", sig.String())
		cancel()
		<-ch
		os.Exit(1)
	}()
	return ctx
}

// Exit logs err (when not nil) and exits with 1, flushing logs first.
func Exit(err error) {
	if err != nil {
		klog.ErrorS(err, "Exiting")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}
