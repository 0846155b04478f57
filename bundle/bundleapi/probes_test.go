package bundleapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestProbes_ReadyOnlyWhileReadyHolds(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ready         func() bool
		wantReadyCode int
	}{
		{"ready", func() bool { return true }, http.StatusOK},
		{"not ready", func() bool { return false }, http.StatusServiceUnavailable},
		{"readiness not known yet (nil) is not ready", nil, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			healthz, readyz := Probes(tc.ready, "caches not synced")
			rec := httptest.NewRecorder()
			healthz.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			if rec.Code != http.StatusOK {
				t.Errorf("/healthz = %d, want 200 whatever the readiness", rec.Code)
			}
			rec = httptest.NewRecorder()
			readyz.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if rec.Code != tc.wantReadyCode {
				t.Errorf("/readyz = %d, want %d", rec.Code, tc.wantReadyCode)
			}
			if rec.Code != http.StatusOK && rec.Body.String() != "caches not synced\n" {
				t.Errorf("/readyz says %q, want the reason", rec.Body.String())
			}
		})
	}
}
