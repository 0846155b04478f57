package webhook

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/test/fixtures"
)

// series counts every series the registry holds.
func (s *testServer) series(t *testing.T) int {
	t.Helper()
	families, err := s.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		n += len(f.GetMetric())
	}
	return n
}

// Anyone who can reach the port can send reviews naming any namespace, kind, operation
// or review version. No label takes such a value: after the first forged review of each
// shape, a thousand more with new values add no series.
func TestMetrics_ForgedReviewsAddNoSeries(t *testing.T) {
	s := newTestServer(t, "", &fakeAuthorizer{})
	send := func(i int) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "corp"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "x"}}}}
		for _, r := range []request{
			// A real kind in ever new namespaces: injected, counted by outcome only.
			{path: routeMutatePods, version: "v1", kind: "Pod", resource: "pods", namespace: fmt.Sprintf("ns-%d", i), object: pod},
			// Made-up kinds, operations and groups on every route.
			{path: routeMutatePods, group: fmt.Sprintf("g%d.example", i), version: "v1", kind: fmt.Sprintf("Kind%d", i), op: admissionv1.Operation(fmt.Sprintf("OP%d", i)), namespace: fmt.Sprintf("ns-%d", i), object: pod},
			{path: routeBundles, group: "trustsync.io", version: fmt.Sprintf("v%d", i), kind: "ClusterTrustBundle", op: admissionv1.Operation(fmt.Sprintf("OP%d", i)), namespace: fmt.Sprintf("ns-%d", i)},
			{path: routeValidateCSR, group: "certificates.k8s.io", version: "v1", kind: fmt.Sprintf("CSR%d", i), namespace: fmt.Sprintf("ns-%d", i)},
			{path: routeMutateCSR, group: "certificates.k8s.io", version: "v1", kind: fmt.Sprintf("CSR%d", i), namespace: fmt.Sprintf("ns-%d", i)},
		} {
			rec := httptest.NewRecorder()
			s.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, r.path, bytes.NewReader(reviewBody(t, r))))
		}
	}
	send(0)
	first := s.series(t)
	for i := 1; i <= 1000; i++ {
		send(i)
	}
	if got := s.series(t); got != first {
		t.Fatalf("1,000 forged reviews grew the metrics from %d to %d series", first, got)
	}
	if got := s.counter(t, "trustsync_webhook_pod_injections_total", map[string]string{"outcome": "injected"}); got < 1000 {
		t.Errorf("injections counted %v, want every injected pod (the reviews did reach the injector)", got)
	}
}

func TestServingCertificateCollector_ExportsTheServedCertificatesExpiryOnceThereIsOne(t *testing.T) {
	var current *tls.Certificate
	get := func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if current == nil {
			return nil, errors.New("no serving certificate yet")
		}
		return current, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(ServingCertificateCollector(get))
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("before any certificate: %d series (%v), want none: an absent certificate is not an expired one", n, err)
	}
	ca := fixtures.CA("serving")
	current = &tls.Certificate{Certificate: [][]byte{ca.Cert.Raw}}
	want := fmt.Sprintf("# HELP trustsync_webhook_serving_certificate_not_after_timestamp_seconds When the serving certificate this replica presents expires, in seconds since the epoch.\n# TYPE trustsync_webhook_serving_certificate_not_after_timestamp_seconds gauge\ntrustsync_webhook_serving_certificate_not_after_timestamp_seconds %g\n", float64(ca.Cert.NotAfter.Unix()))
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// A review the webhook cannot read is counted as malformed, apart from the webhook's
// own failures (error), which are what an alert pages on: anyone who can reach the
// port can send the first.
func TestTimed_AMalformedReviewIsNotAnError(t *testing.T) {
	s := enforcingPodServer(t, nil, nil, nil)
	rec := httptest.NewRecorder()
	s.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, routeMutatePods, strings.NewReader("not a review")))
	if rec.Code < 400 || rec.Code >= 500 {
		t.Fatalf("a malformed review answered %d, want a 4xx", rec.Code)
	}
	want := `
# HELP trustsync_webhook_admission_requests_total Admission reviews handled, by route and outcome (allowed, denied, warned, clamped, defaulted, injected, skipped; error: the webhook failed it, HTTP 5xx; malformed: it could not be read, HTTP 4xx).
# TYPE trustsync_webhook_admission_requests_total counter
trustsync_webhook_admission_requests_total{outcome="malformed",route="/mutate/pods"} 1
`
	if err := testutil.GatherAndCompare(s.registry, strings.NewReader(want), "trustsync_webhook_admission_requests_total"); err != nil {
		t.Error(err)
	}
}
