package kubeapi

import "net/http"

// Probes are the /healthz and /readyz handlers every trustsync binary serves, with one
// meaning: /healthz answers ok while the process serves at all (a liveness probe
// must not restart a replica that is only waiting); /readyz answers ok only while
// notReady() is "", and 503 with what it says otherwise, so that a replica that is not
// ready says why. A nil notReady is not ready: a replica whose readiness is not known
// yet must not be sent work.
func Probes(notReady func() string) (healthz, readyz http.Handler) {
	healthz = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	readyz = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		why := "readiness not known yet"
		if notReady != nil {
			why = notReady()
		}
		if why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return healthz, readyz
}

// Unless is a notReady for Probes from a readiness test and one fixed reason.
func Unless(ready func() bool, why string) func() string {
	return func() string {
		if ready != nil && ready() {
			return ""
		}
		return why
	}
}
