package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trustsync/trustsync/delivery/observe"
)

// Metrics are the agent's Prometheus metrics. They carry no pod label: a node runs
// hundreds of pods, and the pods' own state is on their Events and, per node, in the
// agent's log.
type Metrics struct {
	volumes      prometheus.Gauge
	publishes    *prometheus.CounterVec
	publishTime  prometheus.Histogram
	syncs        *prometheus.CounterVec
	syncTime     prometheus.Histogram
	heldBackPath prometheus.Counter
	observed     prometheus.Gauge
	reports      *prometheus.CounterVec
	reportedAt   prometheus.Gauge
	// anchorExpiry is per anchor, never per pod: a node's pods mostly trust the same
	// few anchors.
	anchorExpiry *prometheus.GaugeVec
}

// NewMetrics creates the metrics; Register adds them to a registry.
func NewMetrics() *Metrics {
	return &Metrics{
		volumes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trustsync_agent_volumes",
			Help: "Volumes the agent keeps current on its node.",
		}),
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_agent_publish_total",
			Help: "NodePublishVolume requests for new volumes and republishes, by result (ok, error).",
		}, []string{"result"}),
		publishTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "trustsync_agent_publish_duration_seconds",
			Help:    "Time from a publish request to its answer: for a new volume, until every required file is written.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_agent_syncs_total",
			Help: "Syncs of the volumes' files, by result (ok: every file written; held_back: some kept their last good content; error: nothing written).",
		}, []string{"result"}),
		syncTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "trustsync_agent_sync_duration_seconds",
			Help:    "Time to render and write one volume's files.",
			Buckets: []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5},
		}),
		heldBackPath: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trustsync_agent_held_back_files_total",
			Help: "Files that kept their last good content in a sync because a source was missing or broken (the pod's Events say which).",
		}),
		observed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trustsync_agent_observed_files",
			Help: "Trust files of the node's pods (any delivery) the agent observes.",
		}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustsync_agent_report_writes_total",
			Help: "Writes of the node's NodeTrustReport, by result (ok, error).",
		}, []string{"result"}),
		reportedAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trustsync_agent_report_last_written_timestamp_seconds",
			Help: "When the node's NodeTrustReport was last written, in seconds since the epoch.",
		}),
		anchorExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trustsync_agent_anchor_expiry_timestamp_seconds",
			Help: "When each anchor that a trust file of the node's pods holds (any delivery) expires, in seconds since the epoch; by anchor (the SHA-256 of its DER, as kubectl trustsync who-trusts takes it) and name (its subject's common name).",
		}, []string{"anchor", "name"}),
	}
}

// Register adds the metrics to reg.
func (m *Metrics) Register(reg prometheus.Registerer) {
	reg.MustRegister(m.volumes, m.publishes, m.publishTime, m.syncs, m.syncTime, m.heldBackPath, m.observed, m.reports, m.reportedAt, m.anchorExpiry)
}

func (m *Metrics) published(err error, took time.Duration) {
	m.publishes.WithLabelValues(result(err)).Inc()
	m.publishTime.Observe(took.Seconds())
}

func (m *Metrics) reportWritten(err error) {
	m.reports.WithLabelValues(result(err)).Inc()
	if err == nil {
		m.reportedAt.SetToCurrentTime()
	}
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// observer counts every volume's syncs.
func (m *Metrics) observer() observe.Observer { return syncMetrics{m} }

type syncMetrics struct{ m *Metrics }

func (s syncMetrics) Wrote(w observe.Written) {
	if w.FromDisk {
		return
	}
	result := "ok"
	switch {
	case w.WriteErr != nil:
		result = "error"
	case len(w.Failed) > 0:
		result = "held_back"
		s.m.heldBackPath.Add(float64(len(w.Failed)))
	}
	s.m.syncs.WithLabelValues(result).Inc()
	s.m.syncTime.Observe(w.Took.Seconds())
}
