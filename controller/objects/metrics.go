package objects

import "github.com/prometheus/client_golang/prometheus"

// Metrics count what the TrustTarget and injection controllers send: their cost
// grows with the objects they write, so it is watched as writes, not guessed.
type Metrics struct {
	writes     *prometheus.CounterVec
	reconciles *prometheus.CounterVec
	// ready is each TrustTarget's Ready condition, so that a target failing for
	// long can be alerted on by name.
	ready *prometheus.GaugeVec
}

// NewMetrics registers the controllers' metrics with reg, once per process.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_targets_writes_total",
			Help: "Writes sent to the API server for TrustTargets (controller=targets) and annotated objects (controller=inject), by kind of object and verb (apply, delete). An apply that would change nothing is not sent.",
		}, []string{"controller", "kind", "verb"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_targets_reconciles_total",
			Help: "Reconciles of a TrustTarget (controller=targets) or an annotated object (controller=inject).",
		}, []string{"controller"}),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trustsync_targets_ready",
			Help: "1 while the TrustTarget's Ready condition is True, 0 while it is False; gone with the target.",
		}, []string{"target"}),
	}
	reg.MustRegister(m.writes, m.reconciles, m.ready)
	return m
}

// Wrote counts one write sent by controller ("targets" or "inject").
func (m *Metrics) Wrote(controller string, kind Kind, verb string) {
	if m != nil {
		m.writes.WithLabelValues(controller, kind.Name, verb).Inc()
	}
}

// Reconciled counts one reconcile of controller.
func (m *Metrics) Reconciled(controller string) {
	if m != nil {
		m.reconciles.WithLabelValues(controller).Inc()
	}
}

// TargetReady records a TrustTarget's Ready condition.
func (m *Metrics) TargetReady(target string, ready bool) {
	if m == nil {
		return
	}
	v := 0.0
	if ready {
		v = 1
	}
	m.ready.WithLabelValues(target).Set(v)
}

// TargetGone drops a deleted TrustTarget's gauge.
func (m *Metrics) TargetGone(target string) {
	if m != nil {
		m.ready.DeleteLabelValues(target)
	}
}
