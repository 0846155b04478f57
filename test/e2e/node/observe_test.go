package node

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/cmd/kubectl-trustsync/plugin"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
	"github.com/trustsync/trustsync/trustreport/query"
)

// kubectlTrustsync runs `kubectl trustsync args... -o json` as a user would, with the
// plugin found on PATH, and decodes what it printed into v; it returns the exit code.
func kubectlTrustsync(t *testing.T, n *cluster.Node, v any, args ...string) int {
	t.Helper()
	out, err := n.Run(context.Background(), "kubectl", append(append([]string{"trustsync"}, args...), "-o", "json")...)
	code := 0
	if err != nil {
		code = 1
		if strings.Contains(err.Error(), "exit status 3") {
			code = 3
		} else {
			t.Fatalf("kubectl trustsync %v: %v", args, err)
		}
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("kubectl trustsync %v -o json: %v\n%s", args, err, out)
	}
	return code
}

// holders are the pods `kubectl trustsync who-trusts` names for anchor, with their
// delivery.
func holders(t *testing.T, n *cluster.Node, ns string, anchor *fixtures.Cert) []string {
	t.Helper()
	var who struct{ Items []query.Holder }
	kubectlTrustsync(t, n, &who, "who-trusts", fmt.Sprintf("%x", sha256.Sum256(anchor.Cert.Raw)), "-n", ns)
	var out []string
	for _, h := range who.Items {
		out = append(out, h.Pod+"/"+h.Delivery)
	}
	slices.Sort(out)
	return out
}

// Pods of all three deliveries hold one bundle; an anchor is added: `kubectl trustsync
// who-trusts` lists each pod once its delivery wrote it (the kubelet's projection
// about a minute later), `status` says meanwhile which pod is behind, and afterwards
// how long each delivery took; the agent, reading the sidecar's volume all along,
// never opens the workload key kept beside the trust file.
func TestObservation_WhoTrustsAnAnchorAcrossEveryDelivery(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "observe", restricted)
	rootA, rootB := fixtures.CA("observe A"), fixtures.CA("observe B")
	ctb := createBundle(t, "e2e-observe", rootA)
	for _, d := range []string{"sidecar", "node", "native"} {
		annotations := map[string]string{"trustsync.io/inject": "true", "trustsync.io/delivery": d, "trustsync.io/bundle-name": ctb.Name}
		if d == "sidecar" {
			annotations["trustsync.io/certificate"] = "true"
		}
		createPod(t, ns, appPod(d, annotations, 1000, "exec sleep 3600"))
	}
	for _, d := range []string{"sidecar", "node", "native"} {
		n.WaitPod(t, ns, d, 2*time.Minute, "Ready", cluster.PodReady)
	}
	all := []string{"native/native", "node/node", "sidecar/sidecar"}
	poll.True(t, time.Minute, "every pod holding A in who-trusts", func() bool { return slices.Equal(holders(t, n, ns, rootA), all) })

	// The node's report is owned by its Node, so it goes when the node does.
	node, err := n.Client.CoreV1().Nodes().Get(context.Background(), sidecarNode(t, n, ns), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := dynamic.NewForConfigOrDie(n.Config).Resource(v1alpha1.NodeTrustReportResource).Get(context.Background(), node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the node's NodeTrustReport: %v", err)
	}
	if owners := r.GetOwnerReferences(); len(owners) != 1 || owners[0].Kind != "Node" || owners[0].UID != node.UID {
		t.Errorf("the node's report is owned by %+v, want the Node %s (uid %s)", owners, node.Name, node.UID)
	}

	// The sidecar's key, on the node, watched for opens from now on.
	sidecar, err := n.Client.CoreV1().Pods(ns).Get(context.Background(), "sidecar", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := filepath.EvalSymlinks(filepath.Join(n.Dir, "kubelet", "pods", string(sidecar.UID), "volumes", "kubernetes.io~empty-dir", "trustsync-anchors", "tls.key"))
	if err != nil {
		t.Fatalf("the sidecar's key on the node: %v", err)
	}
	opens := cluster.WatchOpens(t, key)

	edited := time.Now()
	cur, err := n.Client.CertificatesV1().ClusterTrustBundles().Get(context.Background(), ctb.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.TrustBundle = pemOf(rootA, rootB)
	if _, err := n.Client.CertificatesV1().ClusterTrustBundles().Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, time.Minute, "the sidecar and node pods holding B", func() bool {
		return slices.Equal(holders(t, n, ns, rootB), []string{"node/node", "sidecar/sidecar"})
	})
	fast := time.Since(edited)
	var status struct{ Items []query.FileStatus }
	if code := kubectlTrustsync(t, n, &status, "status", "-n", ns); code != 3 {
		t.Errorf("kubectl trustsync status exits %d while the native pod is behind; want 3", code)
	}
	states := map[string]string{}
	for _, f := range status.Items {
		states[f.Pod] = f.State
	}
	if states["native"] != query.Behind || states["sidecar"] != query.UpToDate || states["node"] != query.UpToDate {
		t.Errorf("status while the kubelet has not projected B yet: %v", states)
	}

	// The kubelet's projection takes about a minute (61-75 s measured): allow three.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		return slices.Equal(holders(t, n, ns, rootB), all), nil
	}); err != nil {
		t.Fatalf("not every pod holds B in who-trusts within 3 minutes: %v", holders(t, n, ns, rootB))
	}
	t.Logf("B in who-trusts: sidecar and node after %.1fs, native after %.1fs (who-trusts polling included)", fast.Seconds(), time.Since(edited).Seconds())
	if code := kubectlTrustsync(t, n, &status, "status", "-n", ns); code != 0 {
		t.Errorf("kubectl trustsync status exits %d once every pod holds B; want 0: %+v", code, status.Items)
	}
	for _, f := range status.Items {
		if f.CaughtUpAfter == nil {
			t.Errorf("%s: no latency given: %+v", f.Pod, f)
			continue
		}
		t.Logf("%s delivery took B %.2fs after the edit, as the node observed it", f.Delivery, float64(*f.CaughtUpAfter))
	}
	// The sidecar itself reads its files back when it writes; the agent never may.
	for _, o := range opens() {
		if strings.Contains(o.Command, "trustsync-agent") {
			t.Errorf("the agent opened the sidecar's key while observing its volume: %s", o)
		} else {
			t.Logf("the sidecar's key was opened by %s", o)
		}
	}
}

// A CA rotation with observed propagation waits for a pod whose sidecar is frozen
// (SIGSTOP): kubectl trustsync rotation names it, and a certificate issued meanwhile
// comes from the old CA; resumed, it takes the new CA, and the next certificate comes
// from the new one. With a short maximum wait, a pod that never catches up lets the
// rotation proceed, and a Warning Event on the CA Secret names it.
func TestObservation_RotationWaitsForAFrozenSidecar(t *testing.T) {
	n := installChart(t)
	upgradeChart(t, n, "--set", "signer.caPropagationMaxWait=40s")
	t.Cleanup(func() { upgradeChart(t, n, "--set", "signer.caPropagationMaxWait=1h") })
	ns := n.Namespace(t, "rotation", restricted)
	createPod(t, ns, appPod("frozen", map[string]string{"trustsync.io/inject": "true", "trustsync.io/signer-name": "trustsync.io/workload"}, 1000, "exec sleep 3600"))
	n.WaitPod(t, ns, "frozen", 2*time.Minute, "Ready", cluster.PodReady)
	rotation := func() plugin.Rotation { return workloadRotation(t, n) }
	var r plugin.Rotation
	poll.True(t, time.Minute, "a stable rotation with every pod holding the CA", func() bool { r = rotation(); return r.Phase == "Stable" })
	oldCA := r.CurrentCA

	// inspect reads the CA Secret as an operator would: the signing CA, held by the pod
	// (at least), its key in the Secret and never printed.
	var in plugin.Inspected
	poll.True(t, time.Minute, "inspect counting the pod among the CA's holders", func() bool {
		kubectlTrustsync(t, n, &in, "inspect", "secret", "trustsync-ca-trustsync.io-workload", "-n", releaseNamespace)
		for _, k := range in.Keys {
			for _, a := range k.Anchors {
				if k.Key == "tls.crt" && a.SHA256 == oldCA && a.HeldBy != nil && *a.HeldBy >= 1 {
					return true
				}
			}
		}
		return false
	})
	if in.KeyPlace != "secret" || !slices.ContainsFunc(in.Keys, func(k plugin.InspectedKey) bool { return k.Key == "tls.key" && k.PrivateKey }) {
		t.Errorf("inspect of the CA Secret: key place %q, keys %+v; want the key in the Secret, said and not shown", in.KeyPlace, in.Keys)
	}

	sidecarSignal(t, n, ns, "frozen", "SIGSTOP")
	t.Cleanup(func() { sidecarSignal(t, n, ns, "frozen", "SIGCONT") })
	requestRotation(t, n)
	poll.True(t, time.Minute, "the frozen pod named as not holding the new CA", func() bool {
		r = rotation()
		return r.Phase == "Waiting" && slices.ContainsFunc(r.Stragglers, func(s query.Straggler) bool { return s.Namespace == ns && s.Pod == "frozen" })
	})
	newCA := r.NewCA
	if issuer := issuer(t, n, ns); issuer != oldCA {
		t.Errorf("a certificate issued while the frozen pod lacks the new CA comes from %s, not the old CA %s", issuer, oldCA)
	}
	sidecarSignal(t, n, ns, "frozen", "SIGCONT")
	poll.True(t, time.Minute, "the new CA signing once the resumed sidecar holds it", func() bool {
		r = rotation()
		return r.Phase == "Stable" && r.CurrentCA == newCA
	})
	if issuer := issuer(t, n, ns); issuer != newCA {
		t.Errorf("a certificate issued after every pod holds the new CA comes from %s, not %s", issuer, newCA)
	}

	// Frozen for good: the rotation waits its maximum, then proceeds and says whom it
	// left behind.
	sidecarSignal(t, n, ns, "frozen", "SIGSTOP")
	requestRotation(t, n)
	poll.True(t, time.Minute, "a second rotation waiting", func() bool { r = rotation(); return r.Phase == "Waiting" && r.NewCA != newCA })
	third := r.NewCA
	wait2 := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		r = rotation()
		return r.Phase == "Stable" && r.CurrentCA == third, nil
	})
	if err != nil {
		t.Fatalf("the rotation did not proceed after its maximum wait: %+v", r)
	}
	t.Logf("the rotation proceeded %.0fs after it began to wait for the frozen pod", time.Since(wait2).Seconds())
	poll.True(t, time.Minute, "a Warning Event naming the frozen pod", func() bool {
		events, err := n.Client.CoreV1().Events(releaseNamespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=trustsync-ca-trustsync.io-workload"})
		if err != nil {
			return false
		}
		for _, e := range events.Items {
			if e.Reason == "RotationProceededWithoutAllPods" && strings.Contains(e.Message, ns+"/frozen") {
				return true
			}
		}
		return false
	})
}

// sidecarNode is the node the pod named sidecar runs on.
func sidecarNode(t *testing.T, n *cluster.Node, ns string) string {
	t.Helper()
	p, err := n.Client.CoreV1().Pods(ns).Get(context.Background(), "sidecar", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Spec.NodeName
}

// sidecarSignal sends signal to pod's sidecar through the container runtime.
func sidecarSignal(t *testing.T, n *cluster.Node, ns, pod, signal string) {
	t.Helper()
	p, err := n.Client.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == "trustsync" {
			if _, err := n.Run(context.Background(), "ctr", "tasks", "kill", "--signal", signal, strings.TrimPrefix(s.ContainerID, "containerd://")); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no trustsync sidecar in %+v", p.Status.InitContainerStatuses)
}

// workloadRotation is the chart's signer's rotation, as `kubectl trustsync rotation
// trustsync.io/workload -o json` prints it.
func workloadRotation(t *testing.T, n *cluster.Node) plugin.Rotation {
	t.Helper()
	var r plugin.Rotation
	kubectlTrustsync(t, n, &r, "rotation", "trustsync.io/workload")
	return r
}

// requestRotation asks the chart's signer to rotate its CA now, as an operator does:
// kubectl trustsync rotate.
func requestRotation(t *testing.T, n *cluster.Node) {
	t.Helper()
	out, err := n.Run(context.Background(), "kubectl", "trustsync", "rotate", "trustsync.io/workload")
	if err != nil || !strings.Contains(out, "Asked trustsync.io/workload for a new CA (annotated Secret "+releaseNamespace+"/trustsync-ca-trustsync.io-workload)") {
		t.Fatalf("kubectl trustsync rotate: %v\n%s", err, out)
	}
}

// issuer has the default ServiceAccount of ns request a certificate of its own
// identity from the chart's signer, and returns the SHA-256 of the anchor (of the
// live bundle) that signed it.
func issuer(t *testing.T, n *cluster.Node, ns string) string {
	t.Helper()
	ctx := context.Background()
	tr, err := n.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(n.Config)
	cfg.BearerToken = tr.Status.Token
	sa := kubernetes.NewForConfigOrDie(cfg)
	id, _ := url.Parse(fmt.Sprintf("spiffe://cluster.local/ns/%s/sa/default", ns))
	req, _ := fixtures.CSR("ignored", nil, []*url.URL{id})
	csr, err := sa.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "rotation-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{SignerName: "trustsync.io/workload", Request: req,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var issued []byte
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := sa.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		issued = got.Status.Certificate
		return len(issued) > 0, nil
	})
	if err != nil {
		t.Fatalf("CSR %s was not issued: %v", csr.Name, err)
	}
	leaves, err := bundle.ParseCertificates(issued)
	if err != nil || len(leaves) == 0 {
		t.Fatalf("the issued certificate: %v", err)
	}
	cas, err := bundle.ParseCertificates([]byte(liveAnchors(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, ca := range cas {
		if leaves[0].CheckSignatureFrom(ca) == nil {
			return fmt.Sprintf("%x", sha256.Sum256(ca.Raw))
		}
	}
	t.Fatal("the certificate verifies against no anchor of the live bundle")
	return ""
}

// The kubelet's own projection warns of nothing; the agent, which sees every pod's
// files, exports the anchor's expiry once and records the Warning on the native pod.
func TestObservation_TheAgentWarnsOfAnExpiringAnchorInANativePod(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "observe-expiry", restricted)
	ctx := context.Background()
	expiring := fixtures.MustNew(fixtures.Options{CommonName: "observe-expiry soon", NotAfter: time.Now().Add(72 * time.Hour)})
	ctb := createBundle(t, "e2e-observe-expiry", fixtures.CA("observe-expiry lasting"), expiring)
	createPod(t, ns, appPod("native", map[string]string{"trustsync.io/inject": "true", "trustsync.io/delivery": "native", "trustsync.io/bundle-name": ctb.Name}, 1000, "exec sleep 3600"))
	n.WaitPod(t, ns, "native", 2*time.Minute, "Ready", cluster.PodReady)

	poll.True(t, time.Minute, "a TrustAnchorExpiring Warning from the agent on the native pod", func() bool {
		events, err := n.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=native,reason=TrustAnchorExpiring"})
		if err != nil {
			return false
		}
		return slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && e.Source.Component == "trustsync-agent" && strings.Contains(e.Message, "observe-expiry soon")
		})
	})
	agents, err := n.Client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
	if err != nil || len(agents.Items) != 1 {
		t.Fatalf("the node's agent pod: %v, %v", agents, err)
	}
	series := fmt.Sprintf(`trustsync_agent_anchor_expiry_timestamp_seconds{anchor=%q,name="observe-expiry soon"} %d`, bundle.AnchorID(expiring.Cert.Raw), expiring.Cert.NotAfter.Unix())
	var metrics []byte
	poll.True(t, time.Minute, "the anchor's expiry among the agent's metrics", func() bool {
		metrics, err = n.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces", releaseNamespace, "pods", agents.Items[0].Name+":9809", "proxy", "metrics").DoRaw(ctx)
		return err == nil && containsSeries(string(metrics), series)
	})
}

// containsSeries says whether a text exposition holds the line, its value written
// either as an integer or in the exponent form the Prometheus client uses.
func containsSeries(exposition, line string) bool {
	name, value, _ := strings.Cut(line, "} ")
	for _, l := range strings.Split(exposition, "\n") {
		got, v, ok := strings.Cut(l, "} ")
		if !ok || got != name {
			continue
		}
		var a, b float64
		if _, err := fmt.Sscan(v, &a); err != nil {
			return false
		}
		if _, err := fmt.Sscan(value, &b); err != nil {
			return false
		}
		return a == b
	}
	return false
}
