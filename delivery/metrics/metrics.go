// Package metrics is the pipeline's Prometheus metrics (trustsync_sidecar_*), written in
// the text format by hand; a nil *Metrics records nothing.
package metrics

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Metrics are the sidecar's Prometheus metrics, served only when
// --metrics-bind-address is set; a nil *Metrics records nothing.
//
// They are written in the Prometheus text format by hand, not with client_golang:
// that library's package initialisation registers its default collectors whether or
// not anything is served, which costs ~0.5 MiB of resident memory (measured, see
// docs/benchmarks.md) in every pod that asks for trust, for four metric families that
// are off by default. The format is small and stable; a test parses the output with
// Prometheus' own parser.
type Metrics struct {
	now func() time.Time

	mu          sync.Mutex
	syncs       map[string]*histogram // by result
	anchors     map[string]int        // by path
	expiries    map[string]time.Time  // the earliest notAfter of each path's anchors
	lastSuccess time.Time
	certExpiry  time.Time // zero without a workload certificate
	renewErrors uint64
	reloads     map[[2]string]uint64 // by target kind and result
}

// durationBuckets: 0.5 ms to 4 s, doubling.
var durationBuckets = func() []float64 {
	b := []float64{0.0005}
	for len(b) < 14 {
		b = append(b, b[len(b)-1]*2)
	}
	return b
}()

type histogram struct {
	buckets []uint64 // cumulative counts per durationBuckets bound
	count   uint64
	sum     float64
}

// New returns empty metrics read at times now gives.
func New(now func() time.Time) *Metrics {
	return &Metrics{now: now, syncs: map[string]*histogram{}, anchors: map[string]int{}, expiries: map[string]time.Time{}, reloads: map[[2]string]uint64{}}
}

// Sync records one sync: whether every path was written (ok), how long it took, and
// the anchors of each path written.
func (m *Metrics) Sync(ok bool, anchors map[string]int, took time.Duration) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	result := "success"
	if !ok {
		result = "error"
	} else {
		m.lastSuccess = m.now()
	}
	h := m.syncs[result]
	if h == nil {
		h = &histogram{buckets: make([]uint64, len(durationBuckets))}
		m.syncs[result] = h
	}
	secs := took.Seconds()
	for i, bound := range durationBuckets {
		if secs <= bound {
			h.buckets[i]++
		}
	}
	h.count++
	h.sum += secs
	for p, n := range anchors {
		m.anchors[p] = n
	}
}

// AnchorExpiry records, per file written, when its first anchor expires.
func (m *Metrics) AnchorExpiry(expiries map[string]time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for p, t := range expiries {
		if t.IsZero() {
			delete(m.expiries, p)
			continue
		}
		m.expiries[p] = t
	}
}

// CertificateExpiry records when the workload certificate expires.
func (m *Metrics) CertificateExpiry(notAfter time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.certExpiry = notAfter
}

// RenewError counts a failed attempt to obtain or renew the workload certificate.
func (m *Metrics) RenewError() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.renewErrors++
}

// Reload counts one reload attempt through a target of kind ("url" or "signal").
func (m *Metrics) Reload(kind string, err error) {
	if m == nil {
		return
	}
	result := "success"
	if err != nil {
		result = "error"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reloads[[2]string{kind, result}]++
}

// ServeHTTP writes the metrics in the Prometheus text exposition format 0.0.4.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m.write(w)
}

func (m *Metrics) write(w io.Writer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	results := sortedKeys(m.syncs)

	header(w, "trustsync_sidecar_syncs_total", "counter", "Syncs of the trust files, by result (success, or error when any path was held at its last good content).")
	for _, r := range results {
		fmt.Fprintf(w, "trustsync_sidecar_syncs_total{result=%s} %d\n", quote(r), m.syncs[r].count)
	}
	header(w, "trustsync_sidecar_sync_duration_seconds", "histogram", "Time to render and write the trust files, by result.")
	for _, r := range results {
		h := m.syncs[r]
		for i, bound := range durationBuckets {
			fmt.Fprintf(w, "trustsync_sidecar_sync_duration_seconds_bucket{result=%s,le=%s} %d\n", quote(r), quote(strconv.FormatFloat(bound, 'g', -1, 64)), h.buckets[i])
		}
		fmt.Fprintf(w, "trustsync_sidecar_sync_duration_seconds_bucket{result=%s,le=\"+Inf\"} %d\n", quote(r), h.count)
		fmt.Fprintf(w, "trustsync_sidecar_sync_duration_seconds_sum{result=%s} %g\n", quote(r), h.sum)
		fmt.Fprintf(w, "trustsync_sidecar_sync_duration_seconds_count{result=%s} %d\n", quote(r), h.count)
	}
	header(w, "trustsync_sidecar_anchors", "gauge", "Distinct trust anchors in each file, as last written.")
	for _, p := range sortedKeys(m.anchors) {
		fmt.Fprintf(w, "trustsync_sidecar_anchors{path=%s} %d\n", quote(p), m.anchors[p])
	}
	header(w, "trustsync_sidecar_anchor_expiry_timestamp_seconds", "gauge", "When the first of each file's anchors expires (Unix seconds), as last written; alert well before.")
	for _, p := range sortedKeys(m.expiries) {
		fmt.Fprintf(w, "trustsync_sidecar_anchor_expiry_timestamp_seconds{path=%s} %d\n", quote(p), m.expiries[p].Unix())
	}
	header(w, "trustsync_sidecar_last_success_timestamp_seconds", "gauge", "When every trust file was last synced without error (Unix seconds; 0 before the first success); alert on time() minus it.")
	last := int64(0)
	if !m.lastSuccess.IsZero() {
		last = m.lastSuccess.Unix()
	}
	fmt.Fprintf(w, "trustsync_sidecar_last_success_timestamp_seconds %d\n", last)
	if !m.certExpiry.IsZero() {
		header(w, "trustsync_sidecar_certificate_expiration_seconds", "gauge", "Seconds until the workload certificate expires (as the kubelet's certificate_manager_client_expiration_seconds).")
		fmt.Fprintf(w, "trustsync_sidecar_certificate_expiration_seconds %g\n", m.certExpiry.Sub(m.now()).Seconds())
		header(w, "trustsync_sidecar_certificate_not_after_timestamp_seconds", "gauge", "When the workload certificate expires (Unix seconds), beside the anchors' expiry.")
		fmt.Fprintf(w, "trustsync_sidecar_certificate_not_after_timestamp_seconds %d\n", m.certExpiry.Unix())
	}
	header(w, "trustsync_sidecar_certificate_renew_errors_total", "counter", "Failed attempts to obtain or renew the workload certificate.")
	fmt.Fprintf(w, "trustsync_sidecar_certificate_renew_errors_total %d\n", m.renewErrors)
	if len(m.reloads) > 0 {
		header(w, "trustsync_sidecar_reloads_total", "counter", "Attempts to tell the app that its trust or certificate changed, by target (url, signal) and result.")
		keys := make([][2]string, 0, len(m.reloads))
		for k := range m.reloads {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b [2]string) int { return strings.Compare(a[0]+" "+a[1], b[0]+" "+b[1]) })
		for _, k := range keys {
			fmt.Fprintf(w, "trustsync_sidecar_reloads_total{target=%s,result=%s} %d\n", quote(k[0]), quote(k[1]), m.reloads[k])
		}
	}
}

func header(w io.Writer, name, kind, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
}

// quote quotes a label value as the text format escapes it: backslash, quote, newline.
func quote(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v) + `"`
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Serve serves m at addr's /metrics until ctx is done.
func Serve(ctx context.Context, addr string, m *Metrics) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot serve metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return nil
}
