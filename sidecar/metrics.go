package sidecar

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the sidecar's Prometheus metrics. They are served only when
// --metrics-bind-address is set; a nil *metrics records nothing.
type metrics struct {
	syncs       *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	anchors     *prometheus.GaugeVec
	lastSuccess time.Time
}

func newMetrics(reg prometheus.Registerer, now func() time.Time) *metrics {
	m := &metrics{
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_sidecar_syncs_total",
			Help: "Syncs of the trust files, by result (success, or error when any path was held at its last good content).",
		}, []string{"result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trustsync_sidecar_sync_duration_seconds",
			Help:    "Time to render and write the trust files, by result.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"result"}),
		anchors: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trustsync_sidecar_anchors",
			Help: "Distinct trust anchors in each file, as last written.",
		}, []string{"path"}),
	}
	reg.MustRegister(m.syncs, m.duration, m.anchors, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "trustsync_sidecar_seconds_since_last_success",
		Help: "Seconds since every trust file was last synced without error; alert when it grows.",
	}, func() float64 {
		if m.lastSuccess.IsZero() {
			return -1
		}
		return now().Sub(m.lastSuccess).Seconds()
	}))
	return m
}

func (m *metrics) observe(res syncResult, anchors map[string]int, took time.Duration) {
	if m == nil {
		return
	}
	result := "success"
	if len(res.failed) > 0 {
		result = "error"
	} else {
		m.lastSuccess = time.Now().Add(-took)
	}
	m.syncs.WithLabelValues(result).Inc()
	m.duration.WithLabelValues(result).Observe(took.Seconds())
	for p, n := range anchors {
		m.anchors.WithLabelValues(p).Set(float64(n))
	}
}
