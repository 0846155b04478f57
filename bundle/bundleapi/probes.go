package bundleapi

import "net/http"

// Probes are the /healthz and /readyz handlers every trustsync binary serves, with one
// meaning: /healthz answers ok while the process serves at all (a liveness probe
// must not restart a replica that is only waiting); /readyz answers ok only while
// ready() holds, and 503 with notReady otherwise. A nil ready is not ready: a replica
// whose readiness is not known yet must not be sent work.
func Probes(ready func() bool, notReady string) (healthz, readyz http.Handler) {
	healthz = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	readyz = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if ready == nil || !ready() {
			http.Error(w, notReady, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return healthz, readyz
}
