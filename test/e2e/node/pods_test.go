package node

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

const (
	mountPath = "/var/run/trust-anchors"
	liveLabel = "kubernetes.io/cluster-trust-bundle-version"
)

// restricted labels a namespace so Pod Security admission enforces the restricted
// profile: anything injected that breaks it makes the pod's creation fail.
var restricted = map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}

// appPod is a restricted-compliant pod whose app container runs script in the shell
// image as uid:uid (0 leaves the uid to the image).
func appPod(name string, annotations map[string]string, uid int64, script string) *corev1.Pod {
	psc := &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	if uid != 0 {
		psc.RunAsUser, psc.RunAsGroup = ptr.To(uid), ptr.To(uid)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{
			SecurityContext:               psc,
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []corev1.Container{{
				Name: "app", Image: cluster.ShellImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", script},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

func createPod(t testing.TB, namespace string, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := theNode(t).Client.CoreV1().Pods(namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", namespace, pod.Name, err)
	}
	return created
}

// createBundle creates a native ClusterTrustBundle without a signer holding anchors,
// deleted when the test ends.
func createBundle(t testing.TB, name string, anchors ...*fixtures.Cert) *certificatesv1.ClusterTrustBundle {
	t.Helper()
	ctb := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: pemOf(anchors...)}}
	client := theNode(t).Client.CertificatesV1().ClusterTrustBundles()
	created, err := client.Create(context.Background(), ctb, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ClusterTrustBundle %s: %v", name, err)
	}
	t.Cleanup(func() { _ = client.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return created
}

func pemOf(certs ...*fixtures.Cert) string {
	var b strings.Builder
	for _, c := range certs {
		b.Write(c.CertPEM())
	}
	return b.String()
}

// anchorSet is the set of certificates (by SHA-256 of their DER) in PEM text.
func anchorSet(t testing.TB, text string) []string {
	t.Helper()
	var set []string
	rest := []byte(text)
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			t.Fatalf("unexpected PEM block %q in a trust file", block.Type)
		}
		set = append(set, fmt.Sprintf("%x", sha256.Sum256(block.Bytes)))
	}
	sort.Strings(set)
	return set
}

// liveAnchors are the anchors the chart's signer publishes in its live bundle.
func liveAnchors(t *testing.T) string {
	t.Helper()
	var text string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := theNode(t).Client.CertificatesV1().ClusterTrustBundles().List(ctx, metav1.ListOptions{LabelSelector: liveLabel + "=live"})
		if err != nil {
			return false, nil
		}
		for _, b := range list.Items {
			if b.Spec.SignerName == "trustsync.io/workload" {
				text = b.Spec.TrustBundle
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("the signer published no live bundle within a minute")
	}
	return text
}

func bundlesJSON(t *testing.T, items ...map[string]any) string {
	t.Helper()
	b, err := json.Marshal(items)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The app's first act is to read the trust file: it must find the complete merged
// file (the native sidecar started first), with SSL_CERT_FILE pointing at it, in a
// namespace enforcing the restricted Pod Security profile.
func TestPod_RestrictedAppFindsTheCompleteMergedFileOnItsFirstRead(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "first-read", restricted)
	root := fixtures.CA("first-read root")
	createBundle(t, "e2e-first-read", root)
	pod := appPod("reader", map[string]string{
		"trustsync.io/inject":        "true",
		"trustsync.io/ssl-cert-file": "true",
		"trustsync.io/sources": bundlesJSON(t,
			map[string]any{"name": "e2e-first-read", "path": "ca.pem"},
			map[string]any{"signerName": "trustsync.io/workload", "labelSelector": map[string]any{"matchLabels": map[string]string{liveLabel: "live"}}, "path": "ca.pem"}),
	}, 1000, `cat "$SSL_CERT_FILE" || echo READ-FAILED; echo "READ-DONE SSL_CERT_FILE=$SSL_CERT_FILE"; exec sleep 3600`)
	createPod(t, ns, pod)
	n.WaitPod(t, ns, "reader", 2*time.Minute, "Ready", cluster.PodReady)

	logs, err := n.Logs(context.Background(), ns, "reader", "app")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs, "READ-FAILED") || !strings.Contains(logs, "READ-DONE SSL_CERT_FILE="+mountPath+"/ca.pem") {
		t.Fatalf("the app's first read failed or SSL_CERT_FILE is wrong; its log:\n%s", logs)
	}
	got := anchorSet(t, logs[:strings.Index(logs, "READ-DONE")])
	want := anchorSet(t, pemOf(root)+liveAnchors(t))
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("first read held anchors %v, want the merge of both sources %v", got, want)
	}
}

// A bundle edit reaches the file as the app container sees it; the time from the
// update call is logged (the benchmark compares it with the native projection).
func TestPod_BundleEditReachesTheFileTheAppReads(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "edit", restricted)
	oldRoot, newRoot := fixtures.CA("edit old root"), fixtures.CA("edit new root")
	ctb := createBundle(t, "e2e-edit", oldRoot)
	createPod(t, ns, appPod("app", map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "e2e-edit"}, 1000, "exec sleep 3600"))
	n.WaitPod(t, ns, "app", 2*time.Minute, "Ready", cluster.PodReady)

	ctb.Spec.TrustBundle = pemOf(oldRoot, newRoot)
	start := time.Now()
	if _, err := n.Client.CertificatesV1().ClusterTrustBundles().Update(context.Background(), ctb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := strings.Join(anchorSet(t, ctb.Spec.TrustBundle), ",")
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := n.Exec(ctx, ns, "app", "app", "cat", mountPath+"/ca_certificates.pem")
		if err != nil {
			return false, nil
		}
		last = out
		return strings.Join(anchorSet(t, out), ",") == want, nil
	})
	if err != nil {
		t.Fatalf("the app container did not see the edited bundle within a minute; it last read:\n%s", last)
	}
	t.Logf("the app container saw the edit %.2fs after the update call began (kubectl exec polling included)", time.Since(start).Seconds())
}

// An app running as a non-root uid opens tls.key itself, and the certificate's chain
// verifies against the trust file it reads.
func TestPod_NonRootAppOpensItsKeyAndTheChainVerifiesAgainstItsTrustFile(t *testing.T) {
	sidecarIdentity(t, installChart(t), "workload-cert")
}

// sidecarIdentity is the sidecar's certificate case, in a namespace named after name
// (which it returns): an app of uid 1234 opens its key, and its certificate verifies
// against its trust file.
func sidecarIdentity(t *testing.T, n *cluster.Node, name string) string {
	t.Helper()
	ns := n.Namespace(t, name, restricted)
	createPod(t, ns, appPod("app", map[string]string{
		"trustsync.io/inject": "true", "trustsync.io/signer-name": "trustsync.io/workload", "trustsync.io/certificate": "true",
	}, 1234, "exec sleep 3600"))
	n.WaitPod(t, ns, "app", 2*time.Minute, "Ready", cluster.PodReady)

	ctx := context.Background()
	key, err := n.Exec(ctx, ns, "app", "app", "cat", mountPath+"/tls.key")
	if err != nil {
		t.Fatalf("the app (uid 1234) cannot read its key: %v", err)
	}
	if b, _ := pem.Decode([]byte(key)); b == nil || !strings.Contains(b.Type, "PRIVATE KEY") {
		t.Fatalf("tls.key as the app reads it is no private key:\n%s", key)
	}
	crt, err := n.Exec(ctx, ns, "app", "app", "cat", mountPath+"/tls.crt")
	if err != nil {
		t.Fatal(err)
	}
	trust, err := n.Exec(ctx, ns, "app", "app", "cat", mountPath+"/ca_certificates.pem")
	if err != nil {
		t.Fatal(err)
	}
	assertIdentity(t, crt, trust, ns)
	return ns
}

// assertIdentity checks a workload certificate as the app reads it: it verifies
// against the trust file the app reads, and names the pod's ServiceAccount (default in
// namespace ns) as its SPIFFE ID.
func assertIdentity(t *testing.T, crt, trust, ns string) {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(trust)) {
		t.Fatalf("the trust file holds no certificate:\n%s", trust)
	}
	b, _ := pem.Decode([]byte(crt))
	if b == nil {
		t.Fatalf("tls.crt holds no PEM:\n%s", crt)
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("the workload certificate does not verify against the trust file the app reads: %v", err)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://cluster.local/ns/"+ns+"/sa/default" {
		t.Fatalf("certificate URIs = %v, want the pod's ServiceAccount SPIFFE ID", leaf.URIs)
	}
}

// The runtime kills the sidecar: the kubelet restarts it, and the app, reading the
// file in a tight loop throughout, never finds it missing or different.
func TestPod_SidecarKilledByTheRuntimeIsRestartedAndTheAppNeverLosesItsFile(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "sidecar-kill", restricted)
	createBundle(t, "e2e-kill", fixtures.CA("kill root a"), fixtures.CA("kill root b"))
	f := mountPath + "/ca_certificates.pem"
	// Every read is compared with the first; a missing or partial file prints GAP.
	script := `first=$(md5sum < ` + f + `); n=0
while true; do
  cur=$(md5sum < ` + f + ` 2>/dev/null) || cur=missing
  [ "$cur" = "$first" ] || echo "GAP $cur"
  n=$((n+1)); [ $((n % 500)) -eq 0 ] && echo "READS $n"
done`
	createPod(t, ns, appPod("app", map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "e2e-kill"}, 1000, script))
	n.WaitPod(t, ns, "app", 2*time.Minute, "Ready", cluster.PodReady)
	reads := func() int {
		logs, _ := n.Logs(context.Background(), ns, "app", "app")
		return strings.Count(logs, "READS ")
	}
	killSidecar(t, n, ns, "app")
	// The reads go on after the restart too: wait for two more reports of them.
	after := reads()
	poll.True(t, time.Minute, "the app reading on after the sidecar's restart", func() bool { return reads() >= after+2 })
	logs, err := n.Logs(context.Background(), ns, "app", "app")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs, "GAP") {
		t.Fatalf("the app found its file missing or changed while the sidecar was down:\n%s", logs)
	}
	if !strings.Contains(logs, "READS") {
		t.Fatalf("the app's read loop did not run:\n%s", logs)
	}
}

// killSidecar kills pod's running sidecar with SIGKILL through the container runtime,
// as an OOM kill would, and waits until the kubelet has restarted it and it is ready.
func killSidecar(t *testing.T, n *cluster.Node, ns, pod string) {
	t.Helper()
	p, err := n.Client.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var sidecarID string
	var restarts int32
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == "trustsync" {
			sidecarID, restarts = strings.TrimPrefix(s.ContainerID, "containerd://"), s.RestartCount
		}
	}
	if sidecarID == "" {
		t.Fatalf("no running trustsync sidecar in %+v", p.Status.InitContainerStatuses)
	}
	if _, err := n.Run(context.Background(), "ctr", "tasks", "kill", "--signal", "SIGKILL", sidecarID); err != nil {
		t.Fatal(err)
	}
	n.WaitPod(t, ns, pod, time.Minute, "restarted and Ready", func(p *corev1.Pod) bool {
		for _, s := range p.Status.InitContainerStatuses {
			if s.Name == "trustsync" {
				return s.RestartCount > restarts && s.Ready && cluster.PodReady(p)
			}
		}
		return false
	})
}

// Legacy mode runs on the same node: a long-running pod gets the file from the init
// container and keeps it current from a regular container; a Job completes (its files
// are written once, with a warning at admission saying so).
func TestPod_LegacyModeServesLongRunningPodsAndLetsJobsComplete(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "legacy", restricted)
	root, added := fixtures.CA("legacy root"), fixtures.CA("legacy added")
	ctb := createBundle(t, "e2e-legacy", root)
	annotations := map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "e2e-legacy", "trustsync.io/sidecar-mode": "legacy"}
	createPod(t, ns, appPod("app", annotations, 1000, "cat "+mountPath+"/ca_certificates.pem && exec sleep 3600"))
	n.WaitPod(t, ns, "app", 2*time.Minute, "Ready", cluster.PodReady)
	ctb.Spec.TrustBundle = pemOf(root, added)
	if _, err := n.Client.CertificatesV1().ClusterTrustBundles().Update(context.Background(), ctb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := strings.Join(anchorSet(t, ctb.Spec.TrustBundle), ",")
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := n.Exec(ctx, ns, "app", "app", "cat", mountPath+"/ca_certificates.pem")
		return err == nil && strings.Join(anchorSet(t, out), ",") == want, nil
	})
	if err != nil {
		t.Fatal("the legacy sidecar did not bring the edit to the app within a minute")
	}

	tmpl := appPod("", annotations, 1000, "grep -q CERTIFICATE "+mountPath+"/ca_certificates.pem")
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "job"},
		Spec:       batchv1.JobSpec{BackoffLimit: ptr.To(int32(0)), Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}},
	}
	if _, err := n.Client.BatchV1().Jobs(ns).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		j, err := n.Client.BatchV1().Jobs(ns).Get(ctx, "job", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				return false, fmt.Errorf("the Job failed: %s", c.Message)
			}
		}
		return j.Status.Succeeded == 1 && j.Status.CompletionTime != nil, nil
	})
	if err != nil {
		t.Fatalf("the legacy-mode Job did not complete: %v", err)
	}
}

// waitWarning waits until a Warning Event on the object named name in ns says want.
func waitWarning(t *testing.T, n *cluster.Node, ns, name, want string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		events, err := n.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range events.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, want) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no Warning Event on %s/%s says %q; its Events:\n%s", ns, name, want, strings.Join(seen, "\n"))
	}
}
