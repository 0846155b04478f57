package webhook

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestServer_MalformedReviewsGetAClear400(t *testing.T) {
	s := newTestServer(t, "", nil)
	tests := []struct {
		name, body, want string
	}{
		{"an empty body", "", "no body found"},
		{"not JSON", "{", "could not decode the admission review"},
		{"a review without a request", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, `malformed AdmissionReview (is "request" missing?)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			s.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, routeBundles, strings.NewReader(tc.body)))
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), tc.want) {
				t.Errorf("HTTP %d %q, want 400 saying %q", rec.Code, rec.Body.String(), tc.want)
			}
		})
	}
}

func TestServer_HealthAndMetrics(t *testing.T) {
	s := newTestServer(t, "", nil)
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ok", "/metrics": "trustsync_webhook_admission_duration_seconds"} {
		// Make sure at least one review has been observed so histograms are exported.
		rec := httptest.NewRecorder()
		s.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, routeBundles, strings.NewReader("")))
		rec = httptest.NewRecorder()
		s.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("GET %s = %d %.200q, want 200 containing %q", path, rec.Code, rec.Body.String(), want)
		}
	}
}
