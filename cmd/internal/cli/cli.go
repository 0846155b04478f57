// Package cli holds what every trustsync binary does the same way: flag parsing with
// Kubernetes' logging flags (-v, --vmodule, --logging-format text|json), --help, and a
// context that ends on SIGTERM or SIGINT.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"
	// The json log format, as Kubernetes' own components register it.
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/buildinfo"
)

// Parse parses args into fs (after adding the logging flags and --version), printing
// usage on standard output for --help and the release for --version, then applies the
// logging configuration. It exits 0 for those and 2 for a bad flag or logging
// configuration (with the usage hint on standard error), as Kubernetes components do.
func Parse(fs *pflag.FlagSet, about string, args []string) {
	showVersion := fs.Bool("version", false, "Print the release and exit.")
	// component-base's logging flags, not klog's own: its file-output flags are
	// deprecated (logs go to stderr as containers expect), and a log collector gets
	// one JSON object per line with --logging-format=json.
	logging := logsapi.NewLoggingConfiguration()
	logsapi.AddFlags(logging, fs)
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
		fmt.Fprintf(os.Stdout, "%s %s\n%s\n", strings.Fields(fs.Name())[0], buildinfo.String(), buildinfo.FIPSLine())
		os.Exit(0)
	}
	if err := logsapi.ValidateAndApply(logging, nil); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\nRun '%s --help' for usage.\n", fs.Name(), err, fs.Name())
		os.Exit(2)
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
