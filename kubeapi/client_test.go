package kubeapi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trustsync/trustsync/kubeapi/clientflags"
)

func TestRESTConfig(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("the kubeconfig's server, with the component's rate limit and user agent", func(t *testing.T) {
		cfg, err := RESTConfig(clientflags.Flags{Kubeconfig: kubeconfig, QPS: 20, Burst: 30}, "trustsync-test")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != "https://127.0.0.1:6443" || cfg.QPS != 20 || cfg.Burst != 30 || cfg.UserAgent != "trustsync-test" {
			t.Errorf("got host %q qps %v burst %d agent %q", cfg.Host, cfg.QPS, cfg.Burst, cfg.UserAgent)
		}
	})
	t.Run("a missing kubeconfig is named in the error", func(t *testing.T) {
		missing := filepath.Join(dir, "nope")
		_, err := RESTConfig(clientflags.Flags{Kubeconfig: missing, QPS: 20, Burst: 30}, "trustsync-test")
		if err == nil || !strings.Contains(err.Error(), "--kubeconfig \""+missing+"\"") {
			t.Fatalf("error %v, want one naming --kubeconfig %q", err, missing)
		}
	})
	t.Run("outside a pod without a kubeconfig, the error says to give one", func(t *testing.T) {
		t.Setenv("KUBERNETES_SERVICE_HOST", "")
		t.Setenv("KUBERNETES_SERVICE_PORT", "")
		_, err := RESTConfig(clientflags.Flags{QPS: 20, Burst: 30}, "trustsync-test")
		if err == nil || !strings.Contains(err.Error(), "outside a pod, give --kubeconfig") {
			t.Fatalf("error %v, want one saying to give --kubeconfig", err)
		}
	})
}

// Retry keeps trying past the point where its waits stop doubling: an outage longer
// than the doubling lasts must not end the caller.
func TestRetry_KeepsTryingPastTheCap(t *testing.T) {
	calls := 0
	err := Retry(context.Background(), time.Millisecond, 2*time.Millisecond, func(context.Context) (bool, error) {
		calls++
		return calls == 20, nil
	})
	if err != nil || calls != 20 {
		t.Fatalf("Retry returned %v after %d attempts, want success on the 20th", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Retry(ctx, time.Millisecond, time.Millisecond, func(context.Context) (bool, error) { return false, nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled Retry returned %v, want context.Canceled", err)
	}
}
