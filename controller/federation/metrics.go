package federation

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// Metrics say how each peer's import stands and what it costs.
type Metrics struct {
	fetches       *prometheus.CounterVec
	bytes         *prometheus.CounterVec
	ready         *prometheus.GaugeVec
	lastRefreshed *prometheus.GaugeVec
	sequence      *prometheus.GaugeVec
	writes        *prometheus.CounterVec
}

// NewMetrics registers the federation controller's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_federation_refreshes_total",
			Help: "Refreshes of a FederatedTrustDomain, by result: Refreshed, or the Ready reason it failed with (EndpointUnreachable, EndpointUnauthenticated, SequenceRegressed, InvalidBundle, ...).",
		}, []string{"federated_trust_domain", "result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_federation_fetched_bytes_total",
			Help: "Bytes of bundle documents read from a peer's endpoint.",
		}, []string{"federated_trust_domain"}),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trustsync_federation_ready",
			Help: "1 while the FederatedTrustDomain's last refresh succeeded, 0 while it failed (the last good anchors are kept); gone with it.",
		}, []string{"federated_trust_domain", "trust_domain"}),
		lastRefreshed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trustsync_federation_last_refreshed_timestamp_seconds",
			Help: "When the peer's endpoint last answered with a bundle accepted, in seconds since the epoch.",
		}, []string{"federated_trust_domain", "trust_domain"}),
		sequence: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trustsync_federation_sequence",
			Help: "The spiffe_sequence of the peer's bundle held.",
		}, []string{"federated_trust_domain", "trust_domain"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_federation_writes_total",
			Help: "Writes sent to the API server by the federation controller, by kind (ClusterTrustBundle, status).",
		}, []string{"kind"}),
	}
	reg.MustRegister(m.fetches, m.bytes, m.ready, m.lastRefreshed, m.sequence, m.writes)
	return m
}

func (m *Metrics) observe(f *v1alpha1.FederatedTrustDomain, r result, now time.Time) {
	if m == nil || f == nil {
		return
	}
	name, td := f.Name, f.Spec.TrustDomain
	m.fetches.WithLabelValues(name, r.reason).Inc()
	m.bytes.WithLabelValues(name).Add(float64(r.bytes))
	ready := 0.0
	if r.ok {
		ready = 1
	}
	m.ready.WithLabelValues(name, td).Set(ready)
	if r.refreshed {
		m.lastRefreshed.WithLabelValues(name, td).Set(float64(now.Unix()))
	}
	if r.sequence != nil {
		m.sequence.WithLabelValues(name, td).Set(float64(*r.sequence))
	}
}

func (m *Metrics) forget(name string) {
	if m == nil {
		return
	}
	for _, v := range []*prometheus.GaugeVec{m.ready, m.lastRefreshed, m.sequence} {
		v.DeletePartialMatch(prometheus.Labels{"federated_trust_domain": name})
	}
	m.fetches.DeletePartialMatch(prometheus.Labels{"federated_trust_domain": name})
	m.bytes.DeletePartialMatch(prometheus.Labels{"federated_trust_domain": name})
}

func (m *Metrics) wrote() {
	if m != nil {
		m.writes.WithLabelValues("ClusterTrustBundle").Inc()
	}
}

func (m *Metrics) statusWritten() {
	if m != nil {
		m.writes.WithLabelValues("status").Inc()
	}
}
