// Package webhook tests trustsync-webhook end to end: the real binary, called by a real
// kube-apiserver over TLS, registered with the chart's own webhook configurations and
// attest ValidatingAdmissionPolicy.
package webhook

import (
	"context"
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

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/test/controlplane"
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
func env(t testing.TB, native bool) (*controlplane.ControlPlane, *webhookServer) {
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

// webhookServer is the running webhook, with the test's own helpers.
type webhookServer struct {
	*controlplane.Webhook
}

func startWebhook(cp *controlplane.ControlPlane) (*webhookServer, error) {
	w, err := cp.StartWebhook(context.Background(), values)
	if err != nil {
		return nil, err
	}
	return &webhookServer{Webhook: w}, nil
}

// metric returns the sum of a counter's or gauge's series whose labels include labels.
func (w *webhookServer) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	resp, err := w.Client().Get(w.URL("/metrics"))
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
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
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
	s := bundleapi.NewStore(client, bundle.Mirror)
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
