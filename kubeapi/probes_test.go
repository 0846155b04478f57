package kubeapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestProbes_ReadyOnlyWhileNothingSaysWhyNot(t *testing.T) {
	for _, tc := range []struct {
		name          string
		notReady      func() string
		wantReadyCode int
		wantBody      string
	}{
		{"ready", Unless(func() bool { return true }, "caches not synced"), http.StatusOK, "ok"},
		{"not ready, with the fixed reason", Unless(func() bool { return false }, "caches not synced"), http.StatusServiceUnavailable, "caches not synced\n"},
		{"not ready, with the reason of the moment", func() string { return "the kubelet has not registered the driver" }, http.StatusServiceUnavailable, "the kubelet has not registered the driver\n"},
		{"readiness not known yet (nil) is not ready", nil, http.StatusServiceUnavailable, "readiness not known yet\n"},
		{"a nil readiness test is not ready", Unless(nil, "starting"), http.StatusServiceUnavailable, "starting\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			healthz, readyz := Probes(tc.notReady)
			rec := httptest.NewRecorder()
			healthz.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			if rec.Code != http.StatusOK {
				t.Errorf("/healthz = %d, want 200 whatever the readiness", rec.Code)
			}
			rec = httptest.NewRecorder()
			readyz.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if rec.Code != tc.wantReadyCode || rec.Body.String() != tc.wantBody {
				t.Errorf("/readyz = %d %q, want %d %q", rec.Code, rec.Body.String(), tc.wantReadyCode, tc.wantBody)
			}
		})
	}
}
