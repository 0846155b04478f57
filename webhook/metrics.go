package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of an admission review, as the requests metric labels them.
const (
	outcomeAllowed   = "allowed"
	outcomeDenied    = "denied"
	outcomeWarned    = "warned"
	outcomeClamped   = "clamped"
	outcomeDefaulted = "defaulted"
	outcomeInjected  = "injected"
	outcomeSkipped   = "skipped"
)

// Metrics are the webhook's own Prometheus metrics.
type Metrics struct {
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	attest    *prometheus.CounterVec
	requested *prometheus.CounterVec
	honored   *prometheus.CounterVec
	// injections is by namespace: pods' names would be unbounded, namespaces are not.
	injections *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_webhook_admission_requests_total",
			Help: "Admission reviews handled, by route and outcome (allowed, denied, warned, clamped, defaulted, injected, skipped, error).",
		}, []string{"route", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trustsync_webhook_admission_duration_seconds",
			Help:    "Time to handle an admission review, from request to response, by route.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}, []string{"route"}),
		attest: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_webhook_attest_decisions_total",
			Help: "Attest checks on mirror ClusterTrustBundles, by decision (allowed, denied, error; an error denies).",
		}, []string{"decision"}),
		requested: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_webhook_csr_requested_duration_total",
			Help: "CertificateSigningRequests that asked for a duration, by signer.",
		}, []string{"signer"}),
		honored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_webhook_csr_honored_duration_total",
			Help: "CertificateSigningRequests whose requested duration was admitted unchanged, by signer.",
		}, []string{"signer"}),
		injections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_webhook_pod_injections_total",
			Help: "Pods reviewed by the injector, by namespace and outcome (injected, skipped, denied), with the reason for skips.",
		}, []string{"namespace", "outcome", "reason"}),
	}
	reg.MustRegister(m.requests, m.latency, m.attest, m.requested, m.honored, m.injections)
	return m
}

func (m *Metrics) outcome(route, outcome string) {
	m.requests.WithLabelValues(route, outcome).Inc()
}
