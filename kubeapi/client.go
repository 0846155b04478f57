// Package kubeapi is what every trustsync binary does the same way with the API
// server, whatever it reads: the client configuration (RESTConfig), the one retry that
// waits out an outage (Retry), and the one meaning of /healthz and /readyz (Probes).
// Bundles themselves are bundle/bundleapi's.
package kubeapi

import (
	"context"
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/trustsync/trustsync/kubeapi/clientflags"
)

// RESTConfig is the client configuration every trustsync binary builds the same way
// from its client flags: the kubeconfig they name (empty: the pod's in-cluster
// configuration), their rate limit, and a user agent that names the component in the
// API server's audit log and metrics.
func RESTConfig(flags clientflags.Flags, userAgent string) (*rest.Config, error) {
	kubeconfig := flags.Kubeconfig
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		if kubeconfig == "" {
			return nil, fmt.Errorf("failed to build the in-cluster API server client configuration (outside a pod, give --kubeconfig): %w", err)
		}
		return nil, fmt.Errorf("failed to build the API server client configuration from --kubeconfig %q: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst, cfg.UserAgent = flags.QPS, flags.Burst, userAgent
	return cfg, nil
}

// Retry runs condition until it is done or fails, or ctx ends: at once, then after
// first, doubling to most, and every most from then on. It never gives up on its own,
// as a component waiting out an API server outage must not;
// wait.ExponentialBackoffWithContext, by contrast, stops with ErrWaitTimeout as soon
// as the doubling reaches its cap, however many steps were asked for.
func Retry(ctx context.Context, first, most time.Duration, condition wait.ConditionWithContextFunc) error {
	return wait.Backoff{Duration: first, Factor: 2, Cap: most, Steps: math.MaxInt32}.DelayFunc().Until(ctx, true, false, condition)
}
