package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/trustsync/trustsync/test/fixtures"
)

// Webhook is a running trustsync-webhook, registered with the API server through the
// chart's own webhook configurations and attest policy, called over real TLS.
type Webhook struct {
	Dir     string
	Port    int
	CA      *fixtures.Cert
	Process *Process
	bin     string
	args    []string
}

// StartWebhook renders the chart with values (YAML, e.g. a policy), starts the webhook
// with the policy file the chart's ConfigMap holds, and applies the chart's admission
// configuration pointing at it. Namespace trustsync-system is created for the chart's
// namespaced objects.
func (cp *ControlPlane) StartWebhook(ctx context.Context, values string) (*Webhook, error) {
	bin, err := BuildBinary("webhook")
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cp.Dir, "webhook")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	w := &Webhook{Dir: dir, Port: port, CA: fixtures.CA("webhook serving CA"), bin: bin}
	if err := w.RotateServingCert(); err != nil {
		return nil, err
	}
	valuesFile := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(valuesFile, []byte(values), 0o600); err != nil {
		return nil, err
	}
	rendered, err := RenderChart("--namespace", "trustsync-system", "-f", valuesFile,
		"--set", "webhook.url="+w.URL(""), "--set", "webhook.caBundle="+base64.StdEncoding.EncodeToString(w.CA.CertPEM()))
	if err != nil {
		return nil, err
	}
	policyFile, err := extractPolicy(rendered, dir)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := WriteKubeconfig(kubeconfig, cp.AdminConfig()); err != nil {
		return nil, err
	}
	w.args = []string{
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port), "--health-bind-address=",
		"--tls-cert-file=" + filepath.Join(dir, "tls.crt"), "--tls-private-key-file=" + filepath.Join(dir, "tls.key"),
		"--kubeconfig=" + kubeconfig, "--policy=" + policyFile, "--shutdown-grace-period=2s", "--namespace=trustsync-system", "-v=2",
	}
	if err := w.Start(); err != nil {
		return nil, err
	}
	if err := cp.CreateNamespace(ctx, "trustsync-system", nil); err != nil {
		return nil, err
	}
	if _, err := Apply(ctx, cp.AdminConfig(), rendered); err != nil {
		return nil, err
	}
	return w, nil
}

// extractPolicy writes the policy file the chart's ConfigMap holds.
func extractPolicy(rendered []byte, dir string) (string, error) {
	for _, doc := range strings.Split(string(rendered), "\n---") {
		var cm struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &cm); err == nil && cm.Kind == "ConfigMap" && cm.Data["policy.yaml"] != "" {
			path := filepath.Join(dir, "policy.yaml")
			return path, os.WriteFile(path, []byte(cm.Data["policy.yaml"]), 0o600)
		}
	}
	return "", fmt.Errorf("the rendered chart has no policy ConfigMap")
}

// RotateServingCert writes a fresh serving certificate for 127.0.0.1, atomically, as a
// Secret volume update does.
func (w *Webhook) RotateServingCert() error {
	leaf, err := fixtures.New(fixtures.Options{
		CommonName: "trustsync-webhook", Leaf: true, Parent: w.CA,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{"tls.key": leaf.KeyPEM(), "tls.crt": leaf.CertPEM()} {
		tmp := filepath.Join(w.Dir, "."+name)
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(w.Dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// Start starts (or restarts) the webhook process, with extra flags after (winning
// over) its own, and waits until it is ready.
func (w *Webhook) Start(extra ...string) error {
	p, err := StartProcess("trustsync-webhook", w.bin, append(append([]string{}, w.args...), extra...), filepath.Join(w.Dir, "webhook.log"))
	if err != nil {
		return err
	}
	w.Process = p
	return wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("trustsync-webhook exited: %v\n%s", p.Wait(), p.Tail())
		}
		resp, err := w.Client().Get(w.URL("/readyz"))
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// Stop stops the webhook process.
func (w *Webhook) Stop() { w.Process.Stop(10 * time.Second) }

// URL is the webhook's address with path.
func (w *Webhook) URL(path string) string {
	return "https://127.0.0.1:" + strconv.Itoa(w.Port) + path
}

// Client trusts the webhook's CA and opens a new connection for every request, so each
// request sees the certificate served at that moment.
func (w *Webhook) Client() *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(w.CA.Cert)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true,
	}}
}

// StartSigner runs trustsync-signer against the control plane as admin, with a
// short-lived Lease so tests do not wait on it, and extra flags after (winning over)
// those.
func (cp *ControlPlane) StartSigner(extra ...string) (*Process, error) {
	return cp.startComponent("signer", extra...)
}

// StartSignerPKCS11 runs trustsync-signer-pkcs11, the signer built with cgo so it
// can load a PKCS#11 module, as StartSigner runs the signer.
func (cp *ControlPlane) StartSignerPKCS11(extra ...string) (*Process, error) {
	return cp.startComponent("signer-pkcs11", extra...)
}

// StartController runs trustsync-controller as the admin, with leader election
// tuned for tests, serving its health and metrics on a free port, with extra flags.
func (cp *ControlPlane) StartController(extra ...string) (*Process, error) {
	return cp.startComponent("controller", extra...)
}

// startComponent runs trustsync-<name>, a leader-elected component.
func (cp *ControlPlane) startComponent(name string, extra ...string) (*Process, error) {
	bin, err := BuildBinary(name)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cp.Dir, name+"-")
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := WriteKubeconfig(kubeconfig, cp.AdminConfig()); err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig, "--health-bind-address=127.0.0.1:" + strconv.Itoa(port),
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms", "-v=2",
	}, extra...)
	p, err := StartProcess("trustsync-"+name, bin, args, filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	p.HealthAddr = "127.0.0.1:" + strconv.Itoa(port)
	return p, nil
}
