package node

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/cmd/kubectl-trustsync/plugin"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// With the chart's tenancy.enforced=true, every place trust enters a namespace on the
// real node enforces the TrustPolicies: a granted pod runs with its trust (sidecar and
// node agent alike); every way of asking for an ungranted bundle or signer is refused
// at admission with the message; a pod the webhook did not see gets no mount from the
// agent; a running agent volume does not take a bundle once its grant is withdrawn;
// annotated objects and TrustTargets write only what is granted; `grants` answers.
func TestTenancy_EnforcedEverywhereTrustEntersANamespace(t *testing.T) {
	n := installChart(t)
	ctx := context.Background()
	upgradeChart(t, n, "--set", "tenancy.enforced=true")
	t.Cleanup(func() { upgradeChart(t, n, "--set", "tenancy.enforced=false") })
	tenA := n.Namespace(t, "ten-a", map[string]string{"team": "a", "pod-security.kubernetes.io/enforce": "restricted"})
	tenB := n.Namespace(t, "ten-b", map[string]string{"team": "b", "pod-security.kubernetes.io/enforce": "restricted"})
	caA, caA2, caB := fixtures.CA("tenant a"), fixtures.CA("tenant a next"), fixtures.CA("tenant b")
	bundleA := createBundle(t, "e2e-ten-a", caA)
	createBundle(t, "e2e-ten-b", caB)
	policies := dynamic.NewForConfigOrDie(n.Config).Resource(v1alpha1.TrustPolicyResource)
	policy := func(name, team, bundle string, signers ...any) {
		t.Helper()
		if _, err := policies.Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": v1alpha1.TrustPolicyKind,
			"metadata": map[string]any{"name": name},
			"spec": map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"team": team}},
				"bundles": []any{map[string]any{"name": bundle}}, "signers": signers}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = policies.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	policy("team-a", "a", "e2e-ten-a", map[string]any{"signerName": "trustsync.io/workload", "dnsNames": []any{"*.ten-a.svc"}})
	policy("team-b", "b", "e2e-ten-b")

	// Granted: a sidecar pod and a node-agent pod of ten-a run holding their bundle.
	asks := func(delivery, bundle string) map[string]string {
		return map[string]string{"trustsync.io/inject": "true", "trustsync.io/delivery": delivery, "trustsync.io/bundle-name": bundle}
	}
	createPod(t, tenA, appPod("sidecar", asks("sidecar", "e2e-ten-a"), 1000, "exec sleep 3600"))
	createPod(t, tenA, appPod("agent", asks("node", "e2e-ten-a"), 1000, "exec sleep 3600"))
	for _, pod := range []string{"sidecar", "agent"} {
		n.WaitPod(t, tenA, pod, 2*time.Minute, "Ready", cluster.PodReady)
		got, err := n.Exec(ctx, tenA, pod, "app", "cat", mountPath+"/ca_certificates.pem")
		if err != nil || !slices.Equal(anchorSet(t, got), anchorSet(t, pemOf(caA))) {
			t.Fatalf("granted pod %s does not hold its bundle (%v):\n%s", pod, err, got)
		}
	}

	// Refused at admission, every way of asking, with the message.
	projected := appPod("projected", nil, 1000, "exec sleep 3600")
	projected.Spec.Volumes = []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptrTo("e2e-ten-a"), Path: "ca.pem"}}}}}}}
	podCert := podCertificatePod("pod-cert", nil)
	outside := appPod("outside", map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "e2e-ten-a",
		"trustsync.io/certificate": "true", "trustsync.io/certificate-dns-names": "api.ten-b.svc"}, 1000, "exec sleep 3600")
	for _, tc := range []struct {
		ns   string
		pod  *corev1.Pod
		want string
	}{
		{tenB, appPod("annotated", asks("sidecar", "e2e-ten-a"), 1000, "exec sleep 3600"), "namespace ten-b may not trust bundle e2e-ten-a: no TrustPolicy grants it; kubectl trustsync grants -n ten-b"},
		{tenB, appPod("agent", asks("node", "e2e-ten-a"), 1000, "exec sleep 3600"), "namespace ten-b may not trust bundle e2e-ten-a"},
		{tenB, projected, "volume roots (projected clusterTrustBundle): namespace ten-b may not trust bundle e2e-ten-a"},
		{tenB, podCert, "volume identity (projected podCertificate): namespace ten-b may not ask trustsync.io/workload for certificates: no TrustPolicy grants it"},
		{tenA, outside, `namespace ten-a may not ask trustsync.io/workload for DNS names api.ten-b.svc: TrustPolicy team-a allows *.ten-a.svc but not "api.ten-b.svc"`},
	} {
		_, err := n.Client.CoreV1().Pods(tc.ns).Create(ctx, tc.pod, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pod %s/%s: created with err %v; want it refused saying %q", tc.ns, tc.pod.Name, err, tc.want)
		}
	}

	// The agent checks again: a pod the webhook never saw (its configuration set
	// aside for a moment, as a failure policy of Ignore would let through) is not
	// mounted, and its Events say why.
	hooks := n.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	saved, err := hooks.Get(ctx, release, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := hooks.Delete(ctx, release, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	restore := func() {
		again := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: saved.Name, Labels: saved.Labels, Annotations: saved.Annotations}, Webhooks: saved.Webhooks}
		if _, err := hooks.Create(context.Background(), again, metav1.CreateOptions{}); err != nil {
			t.Errorf("restore the webhook configuration: %v", err)
		}
	}
	unseen := appPod("unseen", nil, 1000, "exec sleep 3600")
	unseen.Spec.Volumes = []corev1.Volume{{Name: "trust", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: contract.CSIDriverName, ReadOnly: ptrTo(true),
		VolumeAttributes: contract.Spec{Sources: []v1alpha1.Source{{Name: "e2e-ten-a", Path: "ca.pem"}}}.Attributes()}}}}
	unseen.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "trust", MountPath: mountPath, ReadOnly: true}}
	// The API server drops the deleted configuration when its own watch of
	// webhook configurations catches up; until then the webhook still answers.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := n.Client.CoreV1().Pods(tenB).Create(ctx, unseen, metav1.CreateOptions{})
		if err != nil && strings.Contains(err.Error(), `admission webhook "pods.trustsync.io"`) {
			return false, nil
		}
		return true, err
	})
	restore()
	if err != nil {
		t.Fatalf("with the webhook set aside the pod was still refused: %v", err)
	}
	waitWarning(t, n, tenB, "unseen", "volume trust (csi.trustsync.io): namespace ten-b may not trust bundle e2e-ten-a: no TrustPolicy grants it")
	if p, _ := n.Client.CoreV1().Pods(tenB).Get(ctx, "unseen", metav1.GetOptions{}); p != nil && cluster.PodReady(p) {
		t.Error("the pod the agent refused started")
	}

	// Annotated objects and TrustTargets write only what their namespace is granted.
	sources, _ := json.Marshal([]map[string]string{{"name": "e2e-ten-a", "path": "a.pem"}, {"name": "e2e-ten-b", "path": "b.pem"}})
	if _, err := n.Client.CoreV1().ConfigMaps(tenB).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-trust",
		Annotations: map[string]string{"trustsync.io/inject": "true", "trustsync.io/sources": string(sources)}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWarning(t, n, tenB, "app-trust", "left out: not granted to namespace ten-b: a.pem (namespace ten-b may not trust bundle e2e-ten-a")
	var held map[string]string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		cm, err := n.Client.CoreV1().ConfigMaps(tenB).Get(ctx, "app-trust", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		held = cm.Data
		return slices.Equal(anchorSet(t, cm.Data["b.pem"]), anchorSet(t, pemOf(caB))), nil
	}); err != nil || held["a.pem"] != "" {
		t.Errorf("the annotated ConfigMap holds %v; want b.pem alone", held)
	}
	targets := dynamic.NewForConfigOrDie(n.Config).Resource(v1alpha1.TrustTargetResource)
	if _, err := targets.Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": v1alpha1.TrustTargetKind,
		"metadata": map[string]any{"name": "tenants-a"}, "spec": map[string]any{"sources": []any{map[string]any{"name": "e2e-ten-a", "path": "ca.pem"}},
			"target": map[string]any{"configMap": map[string]any{"name": "tenants-a"}, "namespaceSelector": map[string]any{"matchExpressions": []any{
				map[string]any{"key": "team", "operator": "In", "values": []any{"a", "b"}}}}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = targets.Delete(context.Background(), "tenants-a", metav1.DeleteOptions{}) })
	var target v1alpha1.TrustTargetStatus
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := targets.Get(ctx, "tenants-a", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		tt, err := v1alpha1.TrustTargetFromUnstructured(u)
		if err != nil {
			return false, err
		}
		target = tt.Status
		return target.Synced == 1 && target.NotGranted == 1, nil
	}); err != nil {
		t.Fatalf("the TrustTarget's status %+v; want ten-a written and ten-b not granted", target)
	}
	if len(target.NotGrantedNamespaces) != 1 || target.NotGrantedNamespaces[0].Namespace != tenB {
		t.Errorf("notGrantedNamespaces %+v; want ten-b", target.NotGrantedNamespaces)
	}
	if _, err := n.Client.CoreV1().ConfigMaps(tenB).Get(ctx, "tenants-a", metav1.GetOptions{}); err == nil {
		t.Error("the TrustTarget wrote into the namespace not granted its source")
	}

	// `grants` answers a tenant.
	out, err := n.Run(ctx, "kubectl", "trustsync", "grants", "-n", tenA, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var grants plugin.NamespaceGrants
	if err := json.Unmarshal([]byte(out), &grants); err != nil {
		t.Fatalf("grants -o json: %v\n%s", err, out)
	}
	if len(grants.Bundles) != 1 || grants.Bundles[0].Name != "e2e-ten-a" || grants.Bundles[0].Policy != "team-a" || len(grants.Signers) != 1 {
		t.Errorf("grants -n ten-a = %+v; want bundle e2e-ten-a and the workload signer, by team-a", grants)
	}

	// Withdrawn: team-a's policy goes. The running agent volume looks again at once
	// (no source changed), takes the bundle out of its file, and says so; the bundle's
	// next anchor, which the sidecar (not enforcing) takes, never reaches it; status
	// flags the files still holding what is no longer granted (the sidecar's).
	if err := policies.Delete(ctx, "team-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWarning(t, n, tenA, "agent", "Left bundle e2e-ten-a out of the trust files, which are written without it: namespace ten-a may not trust bundle e2e-ten-a")
	poll.True(t, time.Minute, "the agent's file written without the bundle no longer granted", func() bool {
		got, err := n.Exec(ctx, tenA, "agent", "app", "cat", mountPath+"/ca_certificates.pem")
		return err == nil && !strings.Contains(got, string(caA.CertPEM()))
	})
	bundleA.Spec.TrustBundle = pemOf(caA, caA2)
	if _, err := n.Client.CertificatesV1().ClusterTrustBundles().Update(ctx, bundleA, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := n.Exec(ctx, tenA, "sidecar", "app", "cat", mountPath+"/ca_certificates.pem")
		return err == nil && strings.Contains(got, string(caA2.CertPEM())), nil
	}); err != nil {
		t.Fatal("the edit never reached the sidecar, which would have shown it reached the node's watches")
	}
	if got, err := n.Exec(ctx, tenA, "agent", "app", "cat", mountPath+"/ca_certificates.pem"); err != nil || strings.Contains(got, string(caA2.CertPEM())) ||
		strings.Contains(got, string(caA.CertPEM())) {
		t.Errorf("the agent's volume holds the bundle no longer granted (err %v):\n%s", err, got)
	}
	statusOut, _ := n.Run(ctx, "kubectl", "trustsync", "status", "-n", tenA, "-o", "json")
	var files struct {
		Items []struct {
			Pod        string   `json:"pod"`
			NotGranted []string `json:"notGranted"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(statusOut), &files); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, statusOut)
	}
	flagged := 0
	for _, f := range files.Items {
		if len(f.NotGranted) > 0 {
			flagged++
		}
	}
	if flagged == 0 {
		t.Errorf("status flags no file of ten-a as holding an anchor no longer granted:\n%s", statusOut)
	}
}

func ptrTo[T any](v T) *T { return &v }
