package webhook

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/test/controlplane"
)

// enforceTenancy restarts the webhook with tenancy enforced and applies the chart's
// admission configuration rendered with tenancy.enforced=true (which sends pods
// asking for trust by hand too); the test's end restores both.
func enforceTenancy(t *testing.T, cp *controlplane.ControlPlane, w *webhookServer) {
	t.Helper()
	ctx := context.Background()
	apply := func(enforced string) {
		rendered, err := controlplane.RenderChart("--namespace", "trustsync-system", "-f", w.Dir+"/values.yaml",
			"--set", "webhook.url="+w.URL(""), "--set", "webhook.caBundle="+base64.StdEncoding.EncodeToString(w.CA.CertPEM()), "--set", "tenancy.enforced="+enforced)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := controlplane.Apply(ctx, cp.AdminConfig(), rendered); err != nil {
			t.Fatal(err)
		}
	}
	w.Stop()
	if err := w.Start("--tenancy-enforced"); err != nil {
		t.Fatal(err)
	}
	apply("true")
	t.Cleanup(func() {
		w.Stop()
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		apply("false")
	})
}

// With tenancy enforced, a tenant's pod gets the bundles its namespace is granted
// and is refused, by the API server in the webhook's words, every other way of asking:
// by annotation, or by a projected clusterTrustBundle volume written by hand (with no
// trustsync annotation at all). A policy edit takes effect for the next pod, and the
// release's own namespace is exempt.
func TestTenancy_APodGetsOnlyTheBundlesItsNamespaceIsGranted(t *testing.T) {
	cp, w := env(t, true)
	ctx := context.Background()
	if err := cp.InstallPoliciesCRD(ctx); err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	policies := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.TrustPolicyResource)
	for _, ns := range []string{"ten-a", "ten-b"} {
		if err := cp.CreateNamespace(ctx, ns, map[string]string{"tenant": ns}); err != nil {
			t.Fatal(err)
		}
		if err := cp.CreateServiceAccount(ctx, ns, "default"); err != nil {
			t.Fatal(err)
		}
	}
	policy := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "TrustPolicy",
		"metadata": map[string]any{"name": "tenant-a"},
		"spec": map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"tenant": "ten-a"}},
			"bundles": []any{map[string]any{"name": "corp-a"}}}}}
	if _, err := policies.Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = policies.Delete(ctx, "tenant-a", metav1.DeleteOptions{}) })
	enforceTenancy(t, cp, w)

	annotated := func(bundle string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "asks-", Annotations: map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": bundle}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
	}
	projected := func(bundle string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "projects-"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1", VolumeMounts: []corev1.VolumeMount{{Name: "roots", MountPath: "/etc/roots"}}}},
				Volumes: []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To(bundle), Path: "ca.pem"}}}}}}}}}
	}
	create := func(ns string, pod *corev1.Pod) error {
		_, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	// The webhook's watches list the policy just after it starts: the first granted
	// pod is admitted once they have.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return create("ten-a", annotated("corp-a")) == nil, nil
	}); err != nil {
		t.Fatalf("a pod asking for its granted bundle corp-a is not admitted: %v", create("ten-a", annotated("corp-a")))
	}
	for _, tc := range []struct {
		name string
		ns   string
		pod  *corev1.Pod
		want string // "" when admitted
	}{
		{name: "a granted bundle by projected volume", ns: "ten-a", pod: projected("corp-a")},
		{name: "an ungranted bundle by annotation", ns: "ten-a", pod: annotated("corp-b"),
			want: "the pod's trustsync annotations: namespace ten-a may not trust bundle corp-b: no TrustPolicy grants it; kubectl trustsync grants -n ten-a"},
		{name: "an ungranted bundle by a projected volume, without any annotation", ns: "ten-a", pod: projected("corp-b"),
			want: "volume roots (projected clusterTrustBundle): namespace ten-a may not trust bundle corp-b"},
		{name: "another tenant's grant is not its own", ns: "ten-b", pod: projected("corp-a"),
			want: "namespace ten-b may not trust bundle corp-a: no TrustPolicy grants it; kubectl trustsync grants -n ten-b"},
		{name: "a pod asking nothing is admitted", ns: "ten-b", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "plain-"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}},
		{name: "the release's own namespace is exempt", ns: "trustsync-system", pod: projected("corp-b")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := create(tc.ns, tc.pod)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v;\nwant one saying %q", err, tc.want)
			}
		})
	}

	// Granting ten-b too takes effect for its next pod.
	policy, err := policies.Get(ctx, "tenant-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(policy.Object, map[string]any{"matchExpressions": []any{map[string]any{"key": "tenant", "operator": "In", "values": []any{"ten-a", "ten-b"}}}}, "spec", "namespaceSelector")
	if _, err := policies.Update(ctx, policy, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return create("ten-b", projected("corp-a")) == nil, nil
	}); err != nil {
		t.Errorf("after the policy grants ten-b corp-a, its pod is still refused: %v", create("ten-b", projected("corp-a")))
	}
}
