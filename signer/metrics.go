package signer

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the signer's Prometheus metrics.
type Metrics struct {
	csrs         *prometheus.CounterVec
	signLatency  *prometheus.HistogramVec
	requested    *prometheus.CounterVec
	honored      *prometheus.CounterVec
	caNotAfter   *prometheus.GaugeVec
	phase        *prometheus.GaugeVec
	rotationPods *prometheus.GaugeVec
	// rotationUnobserved counts the checks of a waiting rotation that could not
	// tell how far the new CA had reached.
	rotationUnobserved *prometheus.CounterVec
	leader             prometheus.Gauge
	pcrs               *prometheus.CounterVec
	pcrLatency         *prometheus.HistogramVec
}

// NewMetrics registers the signer's metrics with reg, once per process.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		csrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_signer_csrs_total",
			Help: "CertificateSigningRequests handled, by signer, result (approved, denied, signed, failed) and reason.",
		}, []string{"signer", "result", "reason"}),
		signLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trustsync_signer_sign_duration_seconds",
			Help:    "Time from a CSR's approval being seen to its certificate being written, by signer.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"signer"}),
		requested: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_signer_csr_requested_duration_seconds_total",
			Help: "Signed CSRs that asked for a duration, by signer (upstream's csr_requested_duration_seconds_total).",
		}, []string{"signer"}),
		honored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_signer_csr_honored_duration_seconds_total",
			Help: "Of those, signed with the duration asked for, by signer (upstream's csr_honored_duration_seconds_total).",
		}, []string{"signer"}),
		caNotAfter: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trustsync_signer_ca_not_after_timestamp_seconds",
			Help: "When the signing CA expires (Unix seconds), by signer.",
		}, []string{"signer"}),
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trustsync_signer_ca_rotation_phase",
			Help: "1 for the CA rotation phase each signer is in (Stable, Publishing, Waiting), 0 for the others.",
		}, []string{"signer", "phase"}),
		rotationPods: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trustsync_signer_ca_rotation_pods",
			Help: "While a new CA waits for observed propagation: the pods selecting the signer's bundle (state=expected), those seen holding the new CA (holding) and those not (stragglers, which the CA Secret's Events name).",
		}, []string{"signer", "state"}),
		rotationUnobserved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_signer_ca_rotation_unobserved_total",
			Help: "Checks of a waiting CA rotation (observed propagation) that could not tell whether the new CA reached the pods (the CA Secret's RotationUnobserved Event says why), by signer.",
		}, []string{"signer"}),
		pcrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_signer_pod_certificate_requests_total",
			Help: "PodCertificateRequests decided, by signer, result (issued, denied, failed) and reason.",
		}, []string{"signer", "result", "reason"}),
		pcrLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trustsync_signer_pod_certificate_sign_duration_seconds",
			Help:    "Time to decide, sign and write an issued PodCertificateRequest, by signer.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"signer"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trustsync_signer_leader",
			Help: "1 while this replica holds the Lease and acts, 0 otherwise.",
		}),
	}
	reg.MustRegister(m.csrs, m.signLatency, m.requested, m.honored, m.caNotAfter, m.phase, m.rotationPods, m.rotationUnobserved, m.leader, m.pcrs, m.pcrLatency)
	return m
}

func (m *Metrics) setPhase(signer string, p Phase) {
	for _, each := range []Phase{PhaseStable, PhasePublishing, PhaseWaiting} {
		v := 0.0
		if each == p {
			v = 1
		}
		m.phase.WithLabelValues(signer, string(each)).Set(v)
	}
}
