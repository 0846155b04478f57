package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	kwhwebhook "github.com/slok/kubewebhook/v2/pkg/webhook"
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
	// outcomeError is a review the webhook failed (HTTP 5xx); outcomeMalformed one
	// it could not read (4xx), which anyone reaching the port can send.
	outcomeError     = "error"
	outcomeMalformed = "malformed"
)

// Metrics are the webhook's own Prometheus metrics.
type Metrics struct {
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	attest    *prometheus.CounterVec
	requested *prometheus.CounterVec
	honored   *prometheus.CounterVec
	// injections has no namespace label: anyone who can reach the port can send
	// reviews naming any namespace, and each would be a series forever.
	injections *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_webhook_admission_requests_total",
			Help: "Admission reviews handled, by route and outcome (allowed, denied, warned, clamped, defaulted, injected, skipped; error: the webhook failed it, HTTP 5xx; malformed: it could not be read, HTTP 4xx).",
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
			Name: "trustsync_webhook_csr_requested_duration_seconds_total",
			Help: "CertificateSigningRequests that asked for a duration, by signer.",
		}, []string{"signer"}),
		honored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_webhook_csr_honored_duration_seconds_total",
			Help: "CertificateSigningRequests whose requested duration was admitted unchanged, by signer.",
		}, []string{"signer"}),
		injections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_webhook_pod_injections_total",
			Help: "Pods reviewed by the injector, by outcome (injected, skipped, denied), with the reason for skips.",
		}, []string{"outcome", "reason"}),
	}
	reg.MustRegister(m.requests, m.latency, m.attest, m.requested, m.honored, m.injections)
	return m
}

func (m *Metrics) outcome(route, outcome string) {
	m.requests.WithLabelValues(route, outcome).Inc()
}

// boundedRecorder passes the admission library's measurements on with every label
// value that comes from the request reduced to a fixed set: a forged review may name
// any namespace, kind, operation or review version, and each distinct value would
// otherwise be a new series of every histogram, forever (1,500 forged namespaces made
// 24,000 series). The namespace is dropped; the rest keep the values the webhook
// configurations can send, and "other".
type boundedRecorder struct {
	next kwhwebhook.MetricsRecorder
}

var (
	knownKinds = []string{
		"v1/Pod",
		"certificates.k8s.io/v1/CertificateSigningRequest",
		"certificates.k8s.io/v1/ClusterTrustBundle", "certificates.k8s.io/v1beta1/ClusterTrustBundle",
		"certificates.k8s.io/v1alpha1/ClusterTrustBundle", "trustsync.io/v1alpha1/ClusterTrustBundle",
	}
	knownOperations     = []string{"CREATE", "UPDATE", "DELETE", "CONNECT"}
	knownReviewVersions = []string{"v1", "v1beta1"}
)

func oneOf(v string, known []string) string {
	if slices.Contains(known, v) {
		return v
	}
	return "other"
}

func bounded(d kwhwebhook.MeasureOpCommonData) kwhwebhook.MeasureOpCommonData {
	d.ResourceName, d.ResourceNamespace = "", ""
	d.ResourceKind = oneOf(d.ResourceKind, knownKinds)
	d.Operation = oneOf(d.Operation, knownOperations)
	d.AdmissionReviewVersion = oneOf(d.AdmissionReviewVersion, knownReviewVersions)
	return d
}

func (r boundedRecorder) MeasureValidatingWebhookReviewOp(ctx context.Context, d kwhwebhook.MeasureValidatingOpData) {
	d.MeasureOpCommonData = bounded(d.MeasureOpCommonData)
	r.next.MeasureValidatingWebhookReviewOp(ctx, d)
}

func (r boundedRecorder) MeasureMutatingWebhookReviewOp(ctx context.Context, d kwhwebhook.MeasureMutatingOpData) {
	d.MeasureOpCommonData = bounded(d.MeasureOpCommonData)
	r.next.MeasureMutatingWebhookReviewOp(ctx, d)
}

// ServingCertificateCollector exports when the certificate the webhook serves now
// expires, read at each scrape from get (the same source the TLS handshake uses), so
// that a certificate that stopped being renewed is alerted on before the API server
// refuses it. Nothing is exported while there is no certificate yet.
func ServingCertificateCollector(get func(*tls.ClientHelloInfo) (*tls.Certificate, error)) prometheus.Collector {
	return servingCertificate{get: get}
}

var servingCertificateDesc = prometheus.NewDesc("trustsync_webhook_serving_certificate_not_after_timestamp_seconds",
	"When the serving certificate this replica presents expires, in seconds since the epoch.", nil, nil)

type servingCertificate struct {
	get func(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

func (servingCertificate) Describe(ch chan<- *prometheus.Desc) { ch <- servingCertificateDesc }

func (s servingCertificate) Collect(ch chan<- prometheus.Metric) {
	c, err := s.get(&tls.ClientHelloInfo{})
	if err != nil || c == nil || len(c.Certificate) == 0 {
		return
	}
	leaf := c.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return
		}
	}
	ch <- prometheus.MustNewConstMetric(servingCertificateDesc, prometheus.GaugeValue, float64(leaf.NotAfter.Unix()))
}
