package node

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/doccmd"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// These run last: they uninstall the chart, install it again, remove everything, and
// stop the node.

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

// Installing again after an uninstall, this time as docs/install.md teaches for a
// release namespace kept at Pod Security restricted, with the agent in a namespace of
// its own: from the moment `helm install --wait` returns, no pod creation is refused
// (the webhook's readiness waits until the configurations trust its CA, and the
// released Lease is taken at once), and the agent, running in its namespace, fills a
// node-delivery pod's volume.
func TestReinstall_TheAgentInANamespaceOfItsOwnAndEveryPodAdmittedOnceHelmInstallReturns(t *testing.T) {
	n := theNode(t)
	ns := n.Namespace(t, "reinstall", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if _, err := n.Run(ctx, "kubectl", "label", "--overwrite", "namespace", releaseNamespace, "pod-security.kubernetes.io/enforce=restricted"); err != nil {
		t.Fatal(err)
	}
	commands, err := doccmd.Block(filepath.Join(n.Root, "docs", "install.md"), "**Give the agent a namespace of its own**")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := installAsWritten(ctx, n, commands); err != nil {
		t.Fatalf("docs/install.md: %v", err)
	}
	t.Logf("install.md's commands (helm install --wait last) took %.1fs", time.Since(start).Seconds())
	stop := make(chan struct{})
	go func() { time.Sleep(5 * time.Second); close(stop) }()
	created, failures := createPodsUntil(n, ns, stop)
	if len(failures) > 0 {
		t.Fatalf("%d of %d pod creations failed right after the reinstall; first: %s", len(failures), int64(len(failures))+created, failures[0])
	}
	if created == 0 {
		t.Fatal("no pod was created")
	}

	agents, err := n.Client.CoreV1().Pods("trustsync-agent").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
	if err != nil || len(agents.Items) != 1 {
		t.Fatalf("want the agent running in namespace trustsync-agent, found %d pods (%v)", len(agents.Items), err)
	}
	if others, _ := n.Client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"}); len(others.Items) != 0 {
		t.Errorf("an agent pod runs in %s too", releaseNamespace)
	}
	nodeNS := n.Namespace(t, "reinstall-node", restricted)
	createPod(t, nodeNS, appPod("app", map[string]string{
		"trustsync.io/inject":   "true",
		"trustsync.io/delivery": "node",
		"trustsync.io/sources":  bundlesJSON(t, map[string]any{"signerName": "trustsync.io/workload", "labelSelector": map[string]any{"matchLabels": map[string]string{liveLabel: "live"}}, "path": "ca.pem"}),
	}, 1000, `exec sleep 3600`))
	n.WaitPod(t, nodeNS, "app", 2*time.Minute, "Ready", cluster.PodReady)
	trust, err := n.Exec(ctx, nodeNS, "app", "app", "cat", mountPath+"/ca.pem")
	if err != nil {
		t.Fatalf("the app cannot read the file the agent in its own namespace wrote: %v", err)
	}
	if got, want := strings.Join(anchorSet(t, trust), ","), strings.Join(anchorSet(t, liveAnchors(t)), ","); got != want {
		t.Errorf("the app reads anchors %v, want the signer's live bundle %v", got, want)
	}
}

// docs/install.md's "remove everything" recipe, run as written on a cluster holding
// one of each of trustsync's kinds (a TrustTarget with the ConfigMap it wrote, a
// FederatedTrustDomain with the bundle it imported, a TrustPolicy), leaves nothing of
// trustsync: no CRD of trustsync.io, no bundle it wrote, no namespace, no
// cluster-wide object of the chart.
func TestUninstall_RemoveEverythingLeavesNothingOfTrustsync(t *testing.T) {
	n := theNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dyn := dynamic.NewForConfigOrDie(n.Config)
	ns := n.Namespace(t, "remove-target", nil)
	createTarget(t, n, "remove-everything", ns, "remove-cas", map[string]any{"signerName": "trustsync.io/workload", "labelSelector": map[string]any{}, "path": "ca.crt"})
	peer := fixtures.CA("remove-everything peer")
	ftd := &v1alpha1.FederatedTrustDomain{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.FederatedTrustDomainResource.GroupVersion().String(), Kind: v1alpha1.FederatedTrustDomainKind},
		ObjectMeta: metav1.ObjectMeta{Name: "remove-peer"},
		Spec: v1alpha1.FederatedTrustDomainSpec{TrustDomain: "remove.example", BundleEndpointURL: "https://127.0.0.1:1/remove.example",
			BundleEndpointProfile: v1alpha1.BundleEndpointProfile{Type: v1alpha1.ProfileSPIFFE, EndpointSPIFFEID: v1alpha1.BundleEndpointID("remove.example")},
			TrustDomainBundle:     pemOf(peer)},
	}
	obj, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(ftd)
	if _, err := dyn.Resource(v1alpha1.FederatedTrustDomainResource).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(v1alpha1.TrustPolicyResource).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.TrustPolicyResource.GroupVersion().String(), "kind": v1alpha1.TrustPolicyKind,
		"metadata": map[string]any{"name": "remove-everything"},
		"spec":     map[string]any{"namespaceSelector": map[string]any{}, "bundles": []any{map[string]any{"signerName": "trustsync.io/workload"}}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	imported := metav1.ListOptions{LabelSelector: v1alpha1.TrustDomainLabel + "=remove.example"}
	poll.Eventually(t, time.Minute, "the FederatedTrustDomain's bundle imported and the TrustTarget's ConfigMap written", func() (bool, string) {
		bundles, err := n.Client.CertificatesV1().ClusterTrustBundles().List(ctx, imported)
		if err != nil || len(bundles.Items) != 1 {
			return false, fmt.Sprintf("%d imported bundles (%v)", len(bundles.Items), err)
		}
		if _, err := n.Client.CoreV1().ConfigMaps(ns).Get(ctx, "remove-cas", metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		return true, ""
	})

	commands, err := doccmd.Block(filepath.Join(n.Root, "docs", "install.md"), "To remove everything for good")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range commands {
		if _, err := n.Shell(ctx, c); err != nil {
			t.Fatalf("docs/install.md's recipe: %v", err)
		}
	}

	poll.Eventually(t, 2*time.Minute, "nothing of trustsync left in the cluster", func() (bool, string) {
		var left []string
		crds, err := apiextensionsclient.NewForConfigOrDie(n.Config).ApiextensionsV1().CustomResourceDefinitions().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range crds.Items {
			if c.Spec.Group == "trustsync.io" {
				left = append(left, "CRD "+c.Name)
			}
		}
		bundles, err := n.Client.CertificatesV1().ClusterTrustBundles().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, b := range bundles.Items {
			if strings.HasPrefix(b.Name, "trustsync.io") || b.Labels["app.kubernetes.io/managed-by"] == "trustsync" {
				left = append(left, "ClusterTrustBundle "+b.Name)
			}
		}
		for _, name := range []string{releaseNamespace, "trustsync-agent"} {
			if _, err := n.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err == nil {
				left = append(left, "Namespace "+name)
			}
		}
		if _, err := n.Client.CoreV1().ConfigMaps(ns).Get(ctx, "remove-cas", metav1.GetOptions{}); err == nil {
			left = append(left, "ConfigMap "+ns+"/remove-cas")
		}
		ours := metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=trustsync"}
		if l, err := n.Client.RbacV1().ClusterRoles().List(ctx, ours); err == nil && len(l.Items) > 0 {
			left = append(left, fmt.Sprintf("%d ClusterRoles", len(l.Items)))
		}
		if l, err := n.Client.RbacV1().ClusterRoleBindings().List(ctx, ours); err == nil && len(l.Items) > 0 {
			left = append(left, fmt.Sprintf("%d ClusterRoleBindings", len(l.Items)))
		}
		if l, err := n.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, ours); err == nil && len(l.Items) > 0 {
			left = append(left, "the MutatingWebhookConfiguration")
		}
		if l, err := n.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, ours); err == nil && len(l.Items) > 0 {
			left = append(left, fmt.Sprintf("%d ValidatingAdmissionPolicies", len(l.Items)))
		}
		if _, err := n.Client.StorageV1().CSIDrivers().Get(ctx, "csi.trustsync.io", metav1.GetOptions{}); err == nil {
			left = append(left, "CSIDriver csi.trustsync.io")
		}
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
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
