// Package webhook tests trustsync-webhook end to end: the real binary, called by a real
// kube-apiserver over TLS, registered with the chart's own webhook configurations and
// attest ValidatingAdmissionPolicy.
package webhook

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
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	certificatesv1 "k8s.io/api/certificates/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

// The policy the chart is rendered with: its ConfigMap feeds the webhook's --policy,
// and its signers the configurations' matchConditions.
const values = `
policy:
  signers:
  - signerName: example.com/clamped
    maxExpirationSeconds: 3600
    defaultExpirationSeconds: 1800
  - signerName: example.com/rejected
    maxExpirationSeconds: 3600
    overMaximum: Reject
  bundles:
    expiryWarningDays: 30
`

var (
	planes   = controlplane.Shared{Setup: setup}
	webhooks = map[*controlplane.ControlPlane]*webhookServer{}
)

func TestMain(m *testing.M) { planes.Main(m) }

// env returns a control plane (native API served or not) with the mirror CRD, the
// webhook running, and the chart's admission configuration applied.
func env(t *testing.T, native bool) (*controlplane.ControlPlane, *webhookServer) {
	cp := planes.Get(t, native)
	return cp, webhooks[cp]
}

func setup(cp *controlplane.ControlPlane, _ bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cp.InstallMirrorCRD(ctx); err != nil {
		return err
	}
	w, err := startWebhook(cp)
	if err != nil {
		return err
	}
	webhooks[cp] = w
	if err := grantRBAC(ctx, cp); err != nil {
		return err
	}
	return w.waitEffective(ctx, cp)
}

// webhookServer is a running trustsync-webhook process and what it serves with.
type webhookServer struct {
	dir     string
	port    int
	ca      *fixtures.Cert
	bin     string
	args    []string
	process *controlplane.Process
}

func startWebhook(cp *controlplane.ControlPlane) (*webhookServer, error) {
	bin, err := controlplane.BuildBinary("webhook")
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cp.Dir, "webhook")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := controlplane.FreePort()
	if err != nil {
		return nil, err
	}
	w := &webhookServer{dir: dir, port: port, ca: fixtures.CA("webhook serving CA"), bin: bin}
	if err := w.writeServingCert(); err != nil {
		return nil, err
	}

	url := "https://127.0.0.1:" + strconv.Itoa(port)
	rendered, err := controlplane.RenderChart("--namespace", "trustsync-system", "-f", writeFile(dir, "values.yaml", values),
		"--set", "webhook.url="+url, "--set", "webhook.caBundle="+base64.StdEncoding.EncodeToString(w.ca.CertPEM()))
	if err != nil {
		return nil, err
	}
	policyFile, err := extractPolicy(rendered, dir)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := controlplane.WriteKubeconfig(kubeconfig, cp.AdminConfig()); err != nil {
		return nil, err
	}
	w.args = []string{
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + filepath.Join(dir, "tls.crt"), "--tls-private-key-file=" + filepath.Join(dir, "tls.key"),
		"--kubeconfig=" + kubeconfig, "--policy=" + policyFile, "--shutdown-grace-period=2s", "-v=2",
	}
	if err := w.start(); err != nil {
		return nil, err
	}
	if err := cp.CreateNamespace(context.Background(), "trustsync-system", nil); err != nil {
		return nil, err
	}
	if _, err := controlplane.Apply(context.Background(), cp.AdminConfig(), rendered); err != nil {
		return nil, err
	}
	return w, nil
}

func writeFile(dir, name, content string) string {
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		panic(err)
	}
	return path
}

// extractPolicy writes the policy file the chart's ConfigMap holds.
func extractPolicy(rendered []byte, dir string) (string, error) {
	for _, doc := range strings.Split(string(rendered), "\n---") {
		var cm struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &cm); err == nil && cm.Kind == "ConfigMap" && cm.Data["policy.yaml"] != "" {
			return writeFile(dir, "policy.yaml", cm.Data["policy.yaml"]), nil
		}
	}
	return "", fmt.Errorf("the rendered chart has no policy ConfigMap")
}

// writeServingCert writes a fresh serving certificate for 127.0.0.1, atomically (as a
// Secret volume update does), and returns it.
func (w *webhookServer) writeServingCert() error {
	leaf, err := fixtures.New(fixtures.Options{
		CommonName: "trustsync-webhook", Leaf: true, Parent: w.ca,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{"tls.key": leaf.KeyPEM(), "tls.crt": leaf.CertPEM()} {
		tmp := filepath.Join(w.dir, "."+name)
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(w.dir, name)); err != nil {
			return err
		}
	}
	return nil
}

func (w *webhookServer) start() error {
	p, err := controlplane.StartProcess("trustsync-webhook", w.bin, w.args, filepath.Join(w.dir, "webhook.log"))
	if err != nil {
		return err
	}
	w.process = p
	return wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("trustsync-webhook exited: %v\n%s", p.Wait(), p.Tail())
		}
		resp, err := w.client().Get(w.url("/readyz"))
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func (w *webhookServer) stop() { w.process.Stop(10 * time.Second) }

func (w *webhookServer) url(path string) string {
	return "https://127.0.0.1:" + strconv.Itoa(w.port) + path
}

// client trusts the webhook's CA and opens a new connection for every request, so each
// request sees the certificate served at that moment.
func (w *webhookServer) client() *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(w.ca.Cert)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true,
	}}
}

// metric returns the sum of a counter's series whose labels include labels.
func (w *webhookServer) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	resp, err := w.client().Get(w.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, m := range families[name].GetMetric() {
		match := true
		for k, v := range labels {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			match = match && found
		}
		if match {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// waitEffective waits until the API server calls the webhook: its configurations are
// picked up asynchronously.
func (w *webhookServer) waitEffective(ctx context.Context, cp *controlplane.ControlPlane) error {
	client, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	s := bundle.NewStore(client, bundle.Mirror)
	probe := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe"}}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := dryRunCreate(ctx, s, probe)
		return err != nil && strings.Contains(err.Error(), "at least one trust anchor must be provided"), nil
	})
}

// RBAC for the e2e users: "editor" may write bundles of both kinds but has no attest;
// "attester" may also attest for every signer under example.com.
func grantRBAC(ctx context.Context, cp *controlplane.ControlPlane) error {
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	roles := []*rbacv1.ClusterRole{
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-bundle-editor"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"trustsync.io", "certificates.k8s.io"}, Resources: []string{"clustertrustbundles"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"},
		}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-attest-example-com"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"}, ResourceNames: []string{"example.com/*"}, Verbs: []string{"attest"},
		}}},
	}
	bindings := []*rbacv1.ClusterRoleBinding{
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-bundle-editors"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e-bundle-editor"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "e2e-bundle-editors"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-attesters"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e-attest-example-com"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "attester"}}},
	}
	for _, r := range roles {
		if _, err := client.RbacV1().ClusterRoles().Create(ctx, r, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for _, b := range bindings {
		if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}
