package metrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The hand-written exposition must be what Prometheus parses, with the values recorded.
func TestMetrics_ParseAsPrometheusTextFormat(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	m := New(func() time.Time { return now })
	m.Sync(true, map[string]int{"ca.pem": 3, `odd "path"\n`: 1}, 3*time.Millisecond)
	m.Sync(false, nil, 10*time.Second)
	expires := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	m.AnchorExpiry(map[string]time.Time{"ca.pem": expires, "empty.pem": {}})
	certExpires := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	m.CertificateExpiry(certExpires)
	m.Reload("url", nil)
	m.Reload("url", errors.New("refused"))
	m.Reload("url", nil)
	m.Reload("signal", nil)
	now = now.Add(90 * time.Second)

	var out strings.Builder
	m.write(&out)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(out.String()))
	if err != nil {
		t.Fatalf("not the text format: %v\n%s", err, out.String())
	}
	// Prometheus's own linter: units in the name, _total on counters, snake case.
	if problems, err := promlint.New(strings.NewReader(out.String())).Lint(); err != nil || len(problems) > 0 {
		t.Errorf("the names break Prometheus's conventions: %v %+v", err, problems)
	}
	count := func(name, label, value string) float64 {
		for _, metric := range families[name].GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					switch {
					case metric.Counter != nil:
						return metric.GetCounter().GetValue()
					case metric.Gauge != nil:
						return metric.GetGauge().GetValue()
					case metric.Histogram != nil:
						return float64(metric.GetHistogram().GetSampleCount())
					}
				}
			}
		}
		return -1
	}
	for _, tc := range []struct {
		name, label, value string
		want               float64
	}{
		{"trustsync_sidecar_syncs_total", "result", "success", 1},
		{"trustsync_sidecar_syncs_total", "result", "error", 1},
		{"trustsync_sidecar_sync_duration_seconds", "result", "error", 1},
		{"trustsync_sidecar_anchors", "path", "ca.pem", 3},
		{"trustsync_sidecar_reloads_total", "target", "signal", 1},
		{"trustsync_sidecar_reloads_total", "result", "error", 1},
		{"trustsync_sidecar_anchors", "path", `odd "path"\n`, 1},
		{"trustsync_sidecar_anchor_expiry_timestamp_seconds", "path", "ca.pem", float64(expires.Unix())},
		// A file with no anchor has no expiry to report.
		{"trustsync_sidecar_anchor_expiry_timestamp_seconds", "path", "empty.pem", -1},
	} {
		if got := count(tc.name, tc.label, tc.value); got != tc.want {
			t.Errorf("%s{%s=%q} = %v, want %v", tc.name, tc.label, tc.value, got, tc.want)
		}
	}
	h := families["trustsync_sidecar_sync_duration_seconds"].GetMetric()
	for _, metric := range h {
		if metric.GetLabel()[0].GetValue() == "success" {
			// 3 ms: above the 2 ms bound, within 4 ms.
			for _, b := range metric.GetHistogram().GetBucket() {
				want := uint64(0)
				if b.GetUpperBound() >= 0.004 {
					want = 1
				}
				if b.GetCumulativeCount() != want {
					t.Errorf("bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
				}
			}
		}
	}
	if got := families["trustsync_sidecar_certificate_not_after_timestamp_seconds"].GetMetric()[0].GetGauge().GetValue(); got != float64(certExpires.Unix()) {
		t.Errorf("certificate notAfter = %v, want %d", got, certExpires.Unix())
	}
	if got, want := families["trustsync_sidecar_last_success_timestamp_seconds"].GetMetric()[0].GetGauge().GetValue(), time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC).Unix(); got != float64(want) {
		t.Errorf("last success = %v, want the first sync's time %d (the second failed)", got, want)
	}
}

func TestMetrics_NilRecordsNothing(t *testing.T) {
	var m *Metrics
	m.Sync(true, nil, time.Second) // must not panic
}
