package node

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/signer"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// Trust across clusters, as a pod on the real node experiences it: cluster B (a second
// API server, its signer serving its trust domain's bundle on the node's address) and
// this node's cluster A, whose chart-installed controller (with attest on
// trustsync.io/federated alone) imports it. A restricted pod with delivery node asking
// for B's trust domain finds a file that verifies a certificate B's signer issued; B
// rotates its CA and the pod's file holds the new anchor before B's new CA signs; the
// FederatedTrustDomain counts the pod as holding B's anchors.
func TestFederation_APodTrustsWhatAnotherClustersSignerIssuesThroughItsRotation(t *testing.T) {
	n := installChart(t)
	ctx := context.Background()
	b, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	if err := b.CreateNamespace(ctx, "trustsync-system", nil); err != nil {
		t.Fatal(err)
	}
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// The node's address: what pods reach the host at.
	endpoint := net.JoinHostPort(cluster.NodeIP, strconv.Itoa(port))
	const window = 90 * time.Second
	bSigner, err := b.StartSigner("--namespace=trustsync-system", "--signer-name=trustsync.io/workload", "--trust-domain=b.example",
		"--bundle-endpoint-bind-address="+endpoint, "--bundle-endpoint-refresh-hint=5s", "--ca-propagation=timed", "--ca-propagation-window="+window.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bSigner.Stop(5 * time.Second) })
	bClient, err := kubernetes.NewForConfig(b.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	bLive := func() string {
		ctb, err := bClient.CertificatesV1().ClusterTrustBundles().Get(ctx, "trustsync.io:workload:live", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return ctb.Spec.TrustBundle
	}
	poll.Eventually(t, time.Minute, "B's signer publishes its CA", func() (bool, string) { return bLive() != "", "no live bundle in B" })

	aDyn, err := dynamic.NewForConfig(n.Config)
	if err != nil {
		t.Fatal(err)
	}
	ftd := &v1alpha1.FederatedTrustDomain{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.FederatedTrustDomainResource.GroupVersion().String(), Kind: v1alpha1.FederatedTrustDomainKind},
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-b"},
		Spec: v1alpha1.FederatedTrustDomainSpec{TrustDomain: "b.example", BundleEndpointURL: "https://" + endpoint + "/b.example",
			BundleEndpointProfile: v1alpha1.BundleEndpointProfile{Type: v1alpha1.ProfileSPIFFE, EndpointSPIFFEID: v1alpha1.BundleEndpointID("b.example")},
			TrustDomainBundle:     bLive()},
	}
	obj, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(ftd)
	if _, err := aDyn.Resource(v1alpha1.FederatedTrustDomainResource).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = aDyn.Resource(v1alpha1.FederatedTrustDomainResource).Delete(ctx, "cluster-b", metav1.DeleteOptions{})
	})
	status := func() v1alpha1.FederatedTrustDomainStatus {
		u, err := aDyn.Resource(v1alpha1.FederatedTrustDomainResource).Get(ctx, "cluster-b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f, _ := v1alpha1.FederatedTrustDomainFromUnstructured(u)
		return f.Status
	}
	poll.Eventually(t, time.Minute, "A's controller imports B's bundle from a pod", func() (bool, string) {
		s := status()
		for _, c := range s.Conditions {
			if c.Type == v1alpha1.ConditionReady {
				return c.Status == metav1.ConditionTrue, c.Reason + ": " + c.Message
			}
		}
		return false, "no Ready condition yet"
	})

	ns := n.Namespace(t, "federation", restricted)
	createPod(t, ns, appPod("app", map[string]string{
		"trustsync.io/inject":         "true",
		"trustsync.io/delivery":       "node",
		"trustsync.io/signer-name":    v1alpha1.FederatedSignerName,
		"trustsync.io/label-selector": v1alpha1.TrustDomainLabel + "=b.example",
	}, 1000, "exec sleep 3600"))
	n.WaitPod(t, ns, "app", 2*time.Minute, "Ready", cluster.PodReady)
	read := func() string {
		out, err := n.Exec(ctx, ns, "app", "app", "cat", mountPath+"/ca_certificates.pem")
		if err != nil {
			return ""
		}
		return out
	}
	cert, err := fixtures.PeerCertificate(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if err := fixtures.VerifyAgainst(cert, read()); err != nil {
		t.Fatalf("a certificate B's signer issued does not verify against the trust file the app reads: %v", err)
	}

	// B rotates; nobody touches A.
	before := anchorSet(t, bLive())
	patch := `{"metadata":{"annotations":{"` + signer.AnnotationRotateRequested + `":"` + time.Now().UTC().Format(time.RFC3339Nano) + `"}}}`
	if _, err := bClient.CoreV1().Secrets("trustsync-system").Patch(ctx, "trustsync-ca-trustsync.io-workload", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var next string
	poll.Eventually(t, time.Minute, "B publishes its next CA", func() (bool, string) {
		for _, id := range anchorSet(t, bLive()) {
			if !slices.Contains(before, id) {
				next = id
				return true, ""
			}
		}
		return false, "B's live bundle unchanged"
	})
	published := time.Now()
	poll.Eventually(t, window, "the app's file holds B's next anchor", func() (bool, string) {
		return slices.Contains(anchorSet(t, read()), next), "not yet"
	})
	reached := time.Since(published)
	secret, err := bClient.CoreV1().Secrets("trustsync-system").Get(ctx, "trustsync-ca-trustsync.io-workload", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if phase := secret.Annotations[signer.AnnotationPhase]; phase != string(signer.PhaseWaiting) {
		t.Fatalf("when the pod in A held B's next anchor (%.1f s after B published it) B's rotation was %s: the new CA signed first", reached.Seconds(), phase)
	}
	t.Logf("the app in cluster A held B's next anchor %.1f s after B published it (B's refresh hint 5 s; its new CA waits %s)", reached.Seconds(), window)

	// The FederatedTrustDomain counts the pod, from the node's report.
	poll.Eventually(t, 90*time.Second, "the status counts the pod holding B's anchors", func() (bool, string) {
		s := status()
		if s.Pods == nil {
			return false, "no pods count"
		}
		b, _ := json.Marshal(s.Pods)
		return s.Pods.Expected >= 1 && s.Pods.Holding == s.Pods.Expected && slices.Contains(s.Anchors, next), string(b)
	})
	out, err := n.Run(ctx, "kubectl", "trustsync", "federation", "b.example")
	if err != nil || !strings.Contains(out, "cluster-b") || !strings.Contains(out, "1 of 1") {
		t.Errorf("kubectl trustsync federation b.example (%v):\n%s", err, out)
	}
}
