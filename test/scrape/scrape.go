// Package scrape reads a component's /metrics text in tests and benchmarks: a sum of
// samples, and a histogram's buckets, whose difference between two scrapes gives the
// quantiles of what happened in between.
package scrape

import (
	"fmt"
	"math"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape, by family name.
type Metrics map[string]*dto.MetricFamily

// Parse reads the Prometheus text format.
func Parse(text string) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("the metrics do not parse: %w", err)
	}
	return families, nil
}

// Sum adds up the samples of name whose labels include labels: counters and gauges by
// value, histograms by count.
func (m Metrics) Sum(name string, labels map[string]string) float64 {
	total := 0.0
	for _, s := range m[name].GetMetric() {
		if matches(s, labels) {
			total += s.GetCounter().GetValue() + s.GetGauge().GetValue() + float64(s.GetHistogram().GetSampleCount())
		}
	}
	return total
}

// Histogram is a histogram's cumulative bucket counts by upper bound, summed over the
// series whose labels include labels.
type Histogram map[float64]uint64

// Histogram reads name's buckets.
func (m Metrics) Histogram(name string, labels map[string]string) Histogram {
	h := Histogram{}
	for _, s := range m[name].GetMetric() {
		if !matches(s, labels) {
			continue
		}
		// The text format's +Inf bucket is the count, which a client may leave out.
		for _, b := range s.GetHistogram().GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) {
				h[b.GetUpperBound()] += b.GetCumulativeCount()
			}
		}
		h[math.Inf(1)] += s.GetHistogram().GetSampleCount()
	}
	return h
}

// Since is what was observed between an earlier scrape's h0 and h.
func (h Histogram) Since(h0 Histogram) Histogram {
	d := Histogram{}
	for le, n := range h {
		d[le] = n - h0[le]
	}
	return d
}

// Plus is h and o together: one histogram of several processes' series.
func (h Histogram) Plus(o Histogram) Histogram {
	sum := Histogram{}
	for le, n := range h {
		sum[le] += n
	}
	for le, n := range o {
		sum[le] += n
	}
	return sum
}

// Count is how many observations the histogram holds.
func (h Histogram) Count() uint64 { return h[math.Inf(1)] }

// Quantile is the upper bound of the bucket holding the q-quantile (0 < q <= 1): an
// observation at that rank was at most this. It is +Inf when the rank is past the last
// finite bucket, and 0 for an empty histogram.
func (h Histogram) Quantile(q float64) float64 {
	total := h.Count()
	if total == 0 {
		return 0
	}
	bounds := make([]float64, 0, len(h))
	for le := range h {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	rank := uint64(math.Ceil(q * float64(total)))
	for _, le := range bounds {
		if h[le] >= rank {
			return le
		}
	}
	return math.Inf(1)
}

func matches(s *dto.Metric, labels map[string]string) bool {
	for k, v := range labels {
		found := false
		for _, l := range s.GetLabel() {
			found = found || (l.GetName() == k && l.GetValue() == v)
		}
		if !found {
			return false
		}
	}
	return true
}
