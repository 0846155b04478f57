// Package healthserver serves a long-running binary's /healthz, /readyz (with the one
// meaning kubeapi.Probes gives them) and /metrics on a plain-HTTP address. It links
// the Prometheus client, which the sidecar must not, so it is not in kubeapi.
package healthserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/kubeapi"
)

// Serve serves on addr until ctx is done: /readyz answers ok while ready holds, and
// notReady otherwise; /metrics is what gatherer gathers. An empty addr serves nothing.
func Serve(ctx context.Context, addr string, gatherer prometheus.Gatherer, notReady func() string) error {
	if addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot serve health and metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	healthz, readyz := kubeapi.Probes(notReady)
	mux.Handle("/healthz", healthz)
	mux.Handle("/readyz", readyz)
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Health server stopped")
		}
	}()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return nil
}
