package node

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/test/cluster"
)

// These run last: they uninstall the chart, install it again, and stop the node.

// After `helm uninstall`, what remains is exactly what docs/install.md lists: the CRD
// and the bundles, the signer's CA (whose loss would strand every certificate it
// issued), the webhook's TLS Secret and the namespace. The Leases go with the release
// (left behind, they named dead holders and made a reinstall wait), and no webhook
// configuration is left to block pod creation.
func TestUninstall_LeavesExactlyWhatTheDocsSay(t *testing.T) {
	n := installChart(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := n.Run(ctx, "helm", "uninstall", release, "-n", releaseNamespace, "--wait", "--timeout", "2m"); err != nil {
		t.Fatal(err)
	}
	// Pods may still be terminating; what matters is what stays once they are gone.
	waitNoPods(t, n, releaseNamespace)

	if _, err := n.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, release, metav1.GetOptions{}); err == nil {
		t.Error("the MutatingWebhookConfiguration outlived the uninstall")
	}
	if _, err := n.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, release, metav1.GetOptions{}); err == nil {
		t.Error("the ValidatingWebhookConfiguration outlived the uninstall")
	}
	var left []string
	secrets, _ := n.Client.CoreV1().Secrets(releaseNamespace).List(ctx, metav1.ListOptions{})
	for _, s := range secrets.Items {
		left = append(left, "Secret/"+s.Name)
	}
	leases, _ := n.Client.CoordinationV1().Leases(releaseNamespace).List(ctx, metav1.ListOptions{})
	for _, l := range leases.Items {
		left = append(left, "Lease/"+l.Name)
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			t.Errorf("Lease %s still names holder %q after the uninstall; a reinstall would wait for it to expire", l.Name, *l.Spec.HolderIdentity)
		}
	}
	cms, _ := n.Client.CoreV1().ConfigMaps(releaseNamespace).List(ctx, metav1.ListOptions{})
	for _, c := range cms.Items {
		left = append(left, "ConfigMap/"+c.Name)
	}
	sas, _ := n.Client.CoreV1().ServiceAccounts(releaseNamespace).List(ctx, metav1.ListOptions{})
	for _, s := range sas.Items {
		left = append(left, "ServiceAccount/"+s.Name)
	}
	sort.Strings(left)
	// As docs/install.md "Uninstalling" lists them (kube-root-ca.crt and the default
	// ServiceAccount are Kubernetes' own, in every namespace).
	want := []string{"ConfigMap/kube-root-ca.crt",
		"Secret/trustsync-ca-trustsync.io-workload", "Secret/trustsync-webhook-tls", "ServiceAccount/default"}
	if strings.Join(left, " ") != strings.Join(want, " ") {
		t.Errorf("after helm uninstall, namespace %s holds\n  %v\nwant what docs/install.md says remains:\n  %v", releaseNamespace, left, want)
	}
	for _, crd := range []string{"clustertrustbundles.trustsync.io", "nodetrustreports.trustsync.io"} {
		if _, err := n.Run(ctx, "kubectl", "get", "crd", crd); err != nil {
			t.Errorf("the CRD %s is gone after the uninstall: %v", crd, err)
		}
	}
}

func waitNoPods(t testing.TB, n *cluster.Node, namespace string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := n.Client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
		if err == nil && len(pods.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods of %s still there after 2 minutes", namespace)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Installing again after an uninstall: from the moment `helm install --wait` returns,
// no pod creation is refused (the webhook's readiness waits until the configurations
// trust its CA, and the released Lease is taken at once).
func TestReinstall_AdmitsEveryPodOnceHelmInstallReturns(t *testing.T) {
	n := theNode(t)
	ns := n.Namespace(t, "reinstall", nil)
	start := time.Now()
	if err := helmInstall(n); err != nil {
		t.Fatal(err)
	}
	t.Logf("helm install --wait took %.1fs", time.Since(start).Seconds())
	stop := make(chan struct{})
	go func() { time.Sleep(5 * time.Second); close(stop) }()
	created, failures := createPodsUntil(n, ns, stop)
	if len(failures) > 0 {
		t.Fatalf("%d of %d pod creations failed right after the reinstall; first: %s", len(failures), int64(len(failures))+created, failures[0])
	}
	if created == 0 {
		t.Fatal("no pod was created")
	}
}

// Stopping the node after a crash (kubelet and containerd killed, their shims and
// containers orphaned) leaves the host as it was found: no process, mount, network
// interface, cgroup or iptables rule of the node remains.
func TestTeardown_AfterACrashLeavesTheHostAsItWasFound(t *testing.T) {
	n := theNode(t)
	n.Crash("kubelet", "containerd")
	stopped = true
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if added := cluster.TakeSnapshot().Added(before); len(added) > 0 {
		t.Fatalf("the stopped node left on the host: %v", added)
	}
}
