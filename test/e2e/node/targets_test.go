package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// With the chart installed as a user would: a TrustTarget fills a ConfigMap in a
// labelled namespace, and a pod that mounts it as an ordinary volume reads the
// bundle, and the edit that follows; a webhook configuration annotated with a bundle
// gets it as its caBundle, and the node's API server keeps calling the webhook through
// the bundle's CA rotation.
func TestTargets_APodMountsTheTargetAndAWebhookFollowsItsCA(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "targets", restricted)
	rootA, rootB := fixtures.CA("targets node A"), fixtures.CA("targets node B")
	ctb := createBundle(t, "e2e-targets", rootA)
	createTarget(t, n, "e2e-targets", ns, "corp-roots", map[string]any{"name": ctb.Name, "path": "ca.crt"},
		map[string]any{"name": ctb.Name, "path": "truststore.p12", "format": "pkcs12"},
		map[string]any{"name": ctb.Name, "path": "truststore.jks", "format": "jks"})

	pod := appPod("reader", nil, 1000, "exec sleep 3600")
	pod.Spec.Volumes = []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "corp-roots"}, Optional: ptr.To(false)}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "roots", MountPath: "/etc/roots", ReadOnly: true}}
	createPod(t, ns, pod)
	n.WaitPod(t, ns, "reader", 2*time.Minute, "Ready", cluster.PodReady)
	reads := func(anchors ...*fixtures.Cert) func() bool {
		return func() bool {
			out, err := n.Exec(context.Background(), ns, "reader", "app", "cat", "/etc/roots/ca.crt")
			return err == nil && strings.Join(anchorSet(t, out), ",") == strings.Join(anchorSet(t, pemOf(anchors...)), ",")
		}
	}
	poll.True(t, time.Minute, "the pod reading A from the target ConfigMap", reads(rootA))
	cur, err := n.Client.CertificatesV1().ClusterTrustBundles().Get(context.Background(), ctb.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.TrustBundle = pemOf(rootA, rootB)
	if _, err := n.Client.CertificatesV1().ClusterTrustBundles().Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The kubelet refreshes a ConfigMap volume on its sync, about a minute.
	poll.True(t, 3*time.Minute, "the pod reading A and B", reads(rootA, rootB))
	// The truststore keys, as Java's keytool reads them, and a Java TLS client trusts.
	cm, err := n.Client.CoreV1().ConfigMaps(ns).Get(context.Background(), "corp-roots", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	j := javaTools(t)
	for key, typ := range map[string]string{"truststore.p12": "PKCS12", "truststore.jks": "JKS"} {
		store := filepath.Join(t.TempDir(), key)
		if err := os.WriteFile(store, cm.BinaryData[key], 0o644); err != nil {
			t.Fatal(err)
		}
		j.assertEntries(t, store, typ, "changeit", rootA, rootB)
		j.assertTrusts(t, store, typ, "changeit", rootB, true)
	}

	// Written by trustsync-controller, the Deployment apart from the signer: it holds
	// the controllers' Lease, and the signer may not write ConfigMaps at all.
	lease, err := n.Client.CoordinationV1().Leases(releaseNamespace).Get(context.Background(), "trustsync-controller", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || !strings.HasPrefix(*lease.Spec.HolderIdentity, "trustsync-controller-") {
		t.Errorf("the controllers' Lease is not held by a trustsync-controller pod: %+v, %v", lease, err)
	}
	if out, err := n.Run(context.Background(), "kubectl", "auth", "can-i", "patch", "configmaps", "-A", "--as", "system:serviceaccount:"+releaseNamespace+":trustsync-signer"); err == nil || strings.TrimSpace(out) != "no" {
		t.Errorf("the signer's ServiceAccount may patch ConfigMaps: %q, %v", out, err)
	}

	oldCA, newCA := fixtures.CA("node webhook old"), fixtures.CA("node webhook new")
	webhookCA := createBundle(t, "e2e-webhook-ca", oldCA)
	controlplane.WebhookCABundleRotation(t, n.Client, webhookCA.Name, ns, oldCA, newCA, func(anchors ...*fixtures.Cert) {
		b, err := n.Client.CertificatesV1().ClusterTrustBundles().Get(context.Background(), webhookCA.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b.Spec.TrustBundle = pemOf(anchors...)
		if _, err := n.Client.CertificatesV1().ClusterTrustBundles().Update(context.Background(), b, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
}

// createTarget creates the TrustTarget name writing sources into the ConfigMap object
// of namespace ns alone, deleted when the test ends.
func createTarget(t *testing.T, n *cluster.Node, name, ns, object string, sources ...any) {
	t.Helper()
	c := dynamic.NewForConfigOrDie(n.Config).Resource(v1alpha1.TrustTargetResource)
	if _, err := c.Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trustsync.io/v1alpha1", "kind": v1alpha1.TrustTargetKind, "metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"sources": sources,
			"target":  map[string]any{"configMap": map[string]any{"name": object}, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}}},
		}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// Whoever holds view may ask kubectl trustsync: the chart aggregates into view exactly
// what it reads beyond pods. Whoever may not is told which role to bind.
func TestView_CoversWhatKubectlTrustsyncReads(t *testing.T) {
	n := installChart(t)
	ctx := context.Background()
	if _, err := n.Run(ctx, "kubectl", "create", "clusterrolebinding", "e2e-viewer", "--clusterrole=view", "--user=e2e-viewer"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = n.Run(context.Background(), "kubectl", "delete", "clusterrolebinding", "e2e-viewer") })
	// The aggregation controller fills view from the chart's role.
	poll.True(t, time.Minute, "view granting the reports", func() bool {
		out, _ := n.Run(ctx, "kubectl", "auth", "can-i", "list", "nodetrustreports.trustsync.io", "--as", "e2e-viewer")
		return strings.TrimSpace(out) == "yes"
	})
	for _, cmd := range [][]string{{"status", "-A"}, {"rotation"}} {
		out, err := n.Run(ctx, "kubectl", append(append([]string{"trustsync"}, cmd...), "--as", "e2e-viewer")...)
		if err != nil && !strings.Contains(err.Error(), "exit status 3") {
			t.Errorf("kubectl trustsync %v as a viewer: %v\n%s", cmd, err, out)
		}
	}
	_, err := n.Run(ctx, "kubectl", "trustsync", "status", "-A", "--as", "e2e-nobody")
	if err == nil || !strings.Contains(err.Error(), "exit status 1") || !strings.Contains(err.Error(), "bind view to yourself") {
		t.Errorf("as a user with no role, kubectl trustsync says: %v; want exit 1 naming the role to bind", err)
	}
}
