// Package clientflags is the API server client's flags, named, defaulted and checked
// alike by every binary. It stands apart from kubeapi, which builds the client from
// them, so that the sidecar's command-line contract can carry them without linking a
// client.
package clientflags

import (
	"fmt"

	"github.com/spf13/pflag"
)

// The flags' names.
const (
	FlagKubeconfig = "kubeconfig"
	FlagQPS        = "kube-api-qps"
	FlagBurst      = "kube-api-burst"
)

// Flags are how a binary reaches the API server.
type Flags struct {
	// Kubeconfig is a kubeconfig file's path; empty means the pod's in-cluster
	// configuration.
	Kubeconfig string
	// QPS and Burst are the client's own rate limit.
	QPS   float32
	Burst int
}

// AddFlags registers --kubeconfig, --kube-api-qps and --kube-api-burst, f's values
// their defaults. whose names the in-cluster identity ("the agent's ServiceAccount");
// rate, when not empty, says what the rate limits, so an operator knows what raising
// it buys.
func (f *Flags) AddFlags(fs *pflag.FlagSet, whose, rate string) {
	fs.StringVar(&f.Kubeconfig, FlagKubeconfig, f.Kubeconfig, fmt.Sprintf("Path to a kubeconfig file. Empty means in-cluster configuration (%s).", whose))
	qps := "Queries per second to the API server."
	if rate != "" {
		qps = "Queries per second to the API server: " + rate
	}
	fs.Float32Var(&f.QPS, FlagQPS, f.QPS, qps)
	fs.IntVar(&f.Burst, FlagBurst, f.Burst, "Burst of queries to the API server.")
}

// Validate refuses a rate limit no client should run with, naming the flags:
// client-go would take a QPS of 0 for its default of 5, and a negative one for no
// limit at all.
func (f Flags) Validate() error {
	if f.QPS <= 0 || f.Burst < 1 {
		return fmt.Errorf("--%s (%v) and --%s (%d) must be positive", FlagQPS, f.QPS, FlagBurst, f.Burst)
	}
	return nil
}
