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

	"github.com/trustsync/trustsync/buildinfo"
	"github.com/trustsync/trustsync/kubeapi"
)

// Serve serves on addr until ctx is done: /readyz answers ok while ready holds, and
// notReady otherwise; /metrics is what gatherer gathers, and trustsync_build_info. An empty addr serves nothing.
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
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{gatherer, buildInfo()}, promhttp.HandlerOpts{}))
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

// buildInfo is trustsync_build_info, which every component serves beside its own
// metrics: its release, and whether it runs in FIPS 140-3 mode with which module.
func buildInfo() prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "trustsync_build_info",
		Help: "1, labelled with the binary's release (version), whether it runs in FIPS 140-3 mode (fips: on or off) and the Go Cryptographic Module it was built with (fips_module; none for a build without GOFIPS140).",
	}, []string{"version", "fips", "fips_module"})
	on, module := buildinfo.FIPS()
	fips := "off"
	if on {
		fips = "on"
	}
	if module == "" {
		module = "none"
	}
	g.WithLabelValues(buildinfo.String(), fips, module).Set(1)
	reg.MustRegister(g)
	return reg
}
