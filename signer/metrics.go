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
	// requestLatency is the signer's own share of an issuance, from the request
	// first seen to its certificate written.
	requestLatency *prometheus.HistogramVec
	// waiting is how many requests the signer has seen and not yet written an
	// outcome for, by kind.
	waiting *prometheus.GaugeVec
	// keyAvailable is 1 while each signer's keeper can sign.
	keyAvailable *prometheus.GaugeVec
	// waits counts the attempts at a request that found it must wait, by kind and
	// reason.
	waits *prometheus.CounterVec
}

// Kinds of request, the label of the request latency.
const (
	kindCSR = "CertificateSigningRequest"
	kindPCR = "PodCertificateRequest"
)

// NewMetrics registers the signer's metrics with reg, once per process.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		csrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_signer_csrs_total",
			Help: "CertificateSigningRequests handled, by signer, result (approved, denied, signed, failed) and reason.",
		}, []string{"signer", "result", "reason"}),
		signLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trustsync_signer_sign_duration_seconds",
			Help:    "Time from a worker taking an approved CSR to its certificate being written (checks, signing, the write), by signer.",
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
			Help:    "Time from a worker taking a PodCertificateRequest to its certificate being written (checks, signing, the write), by signer.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"signer"}),
		requestLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "trustsync_signer_request_duration_seconds",
			Help: "Time from the signer first seeing a request it can act on (a CSR it approves itself, from its creation; one another approver approved, from the approval; a PodCertificateRequest, from its creation) to its certificate being written: the signer's own share of an issuance, its queue and its client's rate limit included, by signer and kind.",
			// 100 ms is a bound, so that "p99 within 100 ms" can be read off them.
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"signer", "kind"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trustsync_signer_requests_waiting",
			Help: "Requests the signer has seen and can act on but has not yet written an outcome for (approval, certificate, denial or failure), by kind: a backlog that does not drain means the signer cannot sign.",
		}, []string{"kind"}),
		keyAvailable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trustsync_signer_key_available",
			Help: "1 while the keeper of each signer's CA keys (keeper: secret, pkcs11 or awskms) can sign, 0 while it cannot: then nothing is signed, requests wait, and signing resumes within 30 seconds of its return.",
		}, []string{"signer", "keeper"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_signer_request_waits_total",
			Help: "Attempts at a request that found it must wait through no fault of its own, by kind and reason: CANotLoaded (the signer's CA is not loaded yet, retried within a second) or KeyUnavailable (its keeper cannot sign, retried every 5 seconds). Nothing was signed or failed by them.",
		}, []string{"kind", "reason"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trustsync_signer_leader",
			Help: "1 while this replica holds the Lease and acts, 0 otherwise.",
		}),
	}
	reg.MustRegister(m.csrs, m.signLatency, m.requested, m.honored, m.caNotAfter, m.phase, m.rotationPods, m.rotationUnobserved, m.leader, m.pcrs, m.pcrLatency, m.requestLatency, m.waiting, m.keyAvailable, m.waits)
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
