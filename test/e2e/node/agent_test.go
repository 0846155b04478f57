package node

import (
	"context"
	"encoding/pem"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/trustsync/trustsync/agent/store"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// allowSources lets namespace ns's default ServiceAccount read ConfigMap extra-cas and
// Secret store-pass, and creates both: what the pod's own RBAC allows is what the
// agent reads for it.
func allowSources(t *testing.T, n *cluster.Node, ns string, extra *fixtures.Cert, password string) {
	t.Helper()
	ctx := context.Background()
	c := n.Client
	if _, err := c.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "trust-sources"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"extra-cas"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"store-pass"}, Verbs: []string{"get", "list", "watch"}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "trust-sources"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "trust-sources"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "extra-cas"},
		Data: map[string]string{"ca.crt": pemOf(extra)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "store-pass"},
		StringData: map[string]string{"password": password}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// delivery node, on the real node with the chart's agent: a restricted pod asking for
// a bundle merged with a ConfigMap and the signer's live bundle, a PKCS#12 store and a
// workload certificate runs with no container added; its app's first read is
// complete; it reads its key as its own uid, and the certificate verifies against its
// trust file and names its ServiceAccount; a bundle edit reaches the file the app
// reads.
func TestAgent_DeliveryNodeGivesThePodTheSidecarsFilesWithNoContainer(t *testing.T) {
	nodeDelivery(t, installChart(t), "node-delivery")
}

// nodeDelivery is the node agent's delivery case, in a namespace and of a bundle
// named after name: files, key and truststore as the app reads them, and an edit.
func nodeDelivery(t *testing.T, n *cluster.Node, name string) {
	t.Helper()
	ns := n.Namespace(t, name, restricted)
	oldRoot, newRoot, extra := fixtures.CA(name+" root"), fixtures.CA(name+" new root"), fixtures.CA(name+" extra")
	ctb := createBundle(t, "e2e-"+name, oldRoot)
	allowSources(t, n, ns, extra, "s3cret")
	pod := appPod("app", map[string]string{
		"trustsync.io/inject":        "true",
		"trustsync.io/delivery":      "node",
		"trustsync.io/ssl-cert-file": "true",
		"trustsync.io/certificate":   "true",
		"trustsync.io/sources": bundlesJSON(t,
			map[string]any{"name": "e2e-" + name, "path": "ca.pem"},
			map[string]any{"configMap": map[string]any{"name": "extra-cas", "key": "ca.crt"}, "path": "ca.pem"},
			map[string]any{"signerName": "trustsync.io/workload", "labelSelector": map[string]any{"matchLabels": map[string]string{liveLabel: "live"}}, "path": "ca.pem"},
			map[string]any{"name": "e2e-" + name, "path": "truststore.p12", "format": "pkcs12", "passwordSecret": map[string]any{"name": "store-pass", "key": "password"}}),
	}, 1000, `cat "$SSL_CERT_FILE" || echo READ-FAILED; echo "READ-DONE"; exec sleep 3600`)
	created := createPod(t, ns, pod)
	if len(created.Spec.Containers) != 1 || len(created.Spec.InitContainers) != 0 {
		t.Fatalf("delivery node added containers: %d containers, %d init containers", len(created.Spec.Containers), len(created.Spec.InitContainers))
	}
	n.WaitPod(t, ns, "app", 2*time.Minute, "Ready", cluster.PodReady)

	ctx := context.Background()
	logs, err := n.Logs(ctx, ns, "app", "app")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs, "READ-FAILED") || !strings.Contains(logs, "READ-DONE") {
		t.Fatalf("the app's first read failed; its log:\n%s", logs)
	}
	got := anchorSet(t, logs[:strings.Index(logs, "READ-DONE")])
	want := anchorSet(t, pemOf(oldRoot, extra)+liveAnchors(t))
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("first read held anchors %v, want the merge of all three sources %v", got, want)
	}
	key, err := n.Exec(ctx, ns, "app", "app", "cat", mountPath+"/tls.key")
	if err != nil {
		t.Fatalf("the app (uid 1000) cannot read its key: %v", err)
	}
	if b, _ := pem.Decode([]byte(key)); b == nil || !strings.Contains(b.Type, "PRIVATE KEY") {
		t.Fatalf("tls.key as the app reads it is no private key:\n%s", key)
	}
	crt, err := n.Exec(ctx, ns, "app", "app", "cat", mountPath+"/tls.crt")
	if err != nil {
		t.Fatal(err)
	}
	trust, err := n.Exec(ctx, ns, "app", "app", "cat", mountPath+"/ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	assertIdentity(t, crt, trust, ns)
	if _, err := n.Exec(ctx, ns, "app", "app", "test", "-s", mountPath+"/truststore.p12"); err != nil {
		t.Errorf("truststore.p12 is missing or empty as the app sees it: %v", err)
	}

	ctb.Spec.TrustBundle = pemOf(oldRoot, newRoot)
	start := time.Now()
	if _, err := n.Client.CertificatesV1().ClusterTrustBundles().Update(ctx, ctb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantAfter := strings.Join(anchorSet(t, pemOf(oldRoot, newRoot, extra)+liveAnchors(t)), ",")
	var last string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := n.Exec(ctx, ns, "app", "app", "cat", mountPath+"/ca.pem")
		if err != nil {
			return false, nil
		}
		last = out
		return strings.Join(anchorSet(t, out), ",") == wantAfter, nil
	})
	if err != nil {
		t.Fatalf("the app did not see the edited bundle within a minute; it last read:\n%s", last)
	}
	t.Logf("the app saw the edit %.2fs after the update call began (kubectl exec polling included)", time.Since(start).Seconds())
}

// A pod naming a Secret its ServiceAccount may not read does not get it through the
// agent: it does not start, and its Events say why, naming the Secret.
func TestAgent_APodDoesNotGetASecretItsServiceAccountMayNotRead(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "node-forbidden", restricted)
	if _, err := n.Client.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "not-yours"},
		StringData: map[string]string{"ca.crt": pemOf(fixtures.CA("not yours"))}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, ns, appPod("app", map[string]string{
		"trustsync.io/inject": "true", "trustsync.io/delivery": "node",
		"trustsync.io/sources": bundlesJSON(t, map[string]any{"secret": map[string]any{"name": "not-yours", "key": "ca.crt"}, "path": "ca.pem"}),
	}, 1000, "exec sleep 3600"))
	waitWarning(t, n, ns, "app", `Secret "not-yours": secrets "not-yours" is forbidden`)
	p, err := n.Client.CoreV1().Pods(ns).Get(context.Background(), "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cluster.PodReady(p) {
		t.Error("the pod started without its trust file")
	}
}

// The agent killed with SIGKILL (as an OOM kill would) in the middle of a burst of
// edits: the apps reading their files without pause never find one missing or
// partial; the kubelet restarts the agent, which adopts every live volume and brings
// it up to date; a pod deleted while it was down leaves nothing once it is back.
func TestAgent_KilledInABurstOfEditsNoAppReadsAPartialFileAndEveryVolumeConverges(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "agent-kill", restricted)
	ctb := createBundle(t, "e2e-agent-kill", fixtures.CA("agent-kill 0"))
	f := mountPath + "/ca_certificates.pem"
	// Each read must be a whole PEM file: as many END lines as BEGIN lines, at least one.
	// The boundaries are matched whole, as base64 may hold "END" by chance.
	script := `n=0
while true; do
  c=$(cat ` + f + ` 2>/dev/null) || { echo "GAP missing"; continue; }
  b=$(echo "$c" | grep -c '^-----BEGIN '); e=$(echo "$c" | grep -c '^-----END ')
  { [ "$b" -gt 0 ] && [ "$b" = "$e" ]; } || echo "GAP partial $b $e"
  n=$((n+1)); [ $((n % 20)) -eq 0 ] && echo "READS $n"
done`
	annotations := map[string]string{"trustsync.io/inject": "true", "trustsync.io/delivery": "node", "trustsync.io/bundle-name": "e2e-agent-kill"}
	for _, name := range []string{"reader-0", "reader-1", "gone"} {
		createPod(t, ns, appPod(name, annotations, 1000, script))
	}
	for _, name := range []string{"reader-0", "reader-1", "gone"} {
		n.WaitPod(t, ns, name, 2*time.Minute, "Ready", cluster.PodReady)
	}
	gone, err := n.Client.CoreV1().Pods(ns).Get(context.Background(), "gone", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := agentVolumes(t, n)[string(gone.UID)]; !ok {
		t.Fatalf("the agent keeps no volume for pod gone (uid %s): %v", gone.UID, agentVolumes(t, n))
	}

	ctx := context.Background()
	edit := func(i int) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			cur, err := n.Client.CertificatesV1().ClusterTrustBundles().Get(ctx, ctb.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			cur.Spec.TrustBundle = pemOf(fixtures.CA(fmt.Sprintf("agent-kill %d", i)))
			_, err = n.Client.CertificatesV1().ClusterTrustBundles().Update(ctx, cur, metav1.UpdateOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 3; i++ {
		edit(i)
		time.Sleep(100 * time.Millisecond)
	}
	killAgent(t, n)
	edit(4)
	if err := n.Client.CoreV1().Pods(ns).Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	edit(5)
	for _, name := range []string{"reader-0", "reader-1"} {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			out, err := n.Exec(ctx, ns, name, "app", "cat", f)
			last = out
			return err == nil && strings.Join(anchorSet(t, out), ",") == strings.Join(anchorSet(t, currentBundle(t, n, ctb.Name)), ","), nil
		})
		if err != nil {
			t.Fatalf("%s did not converge on the bundle after the agent's restart; it last read:\n%s", name, last)
		}
	}
	// Other tests' pods come and go on the node, so the volumes are told apart by
	// their pods, not counted.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := n.Client.CoreV1().Pods(ns).Get(ctx, "gone", metav1.GetOptions{})
		_, kept := agentVolumes(t, n)[string(gone.UID)]
		return err != nil && !kept, nil
	})
	if err != nil {
		t.Errorf("the pod deleted while the agent was down is not gone with its volume: the agent keeps %v", agentVolumes(t, n))
	}
	for _, name := range []string{"reader-0", "reader-1"} {
		p, err := n.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := agentVolumes(t, n)[string(p.UID)]; !ok {
			t.Errorf("the live pod %s lost its volume after the agent's restart: the agent keeps %v", name, agentVolumes(t, n))
		}
	}
	if mounts := cluster.MountsUnder(filepath.Join(n.Dir, "kubelet", "pods", string(gone.UID))); len(mounts) > 0 {
		t.Errorf("the deleted pod's mounts remain: %v", mounts)
	}
	for _, name := range []string{"reader-0", "reader-1"} {
		logs, err := n.Logs(ctx, ns, name, "app")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(logs, "GAP") {
			t.Errorf("%s read a missing or partial file:\n%s", name, logs)
		}
		if !strings.Contains(logs, "READS") {
			t.Errorf("%s's read loop did not run:\n%s", name, logs)
		}
	}
}

// currentBundle is the bundle's PEM now.
func currentBundle(t *testing.T, n *cluster.Node, name string) string {
	t.Helper()
	b, err := n.Client.CertificatesV1().ClusterTrustBundles().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return b.Spec.TrustBundle
}

// killAgent kills the node's agent container with SIGKILL through the runtime and
// waits until the kubelet has restarted it and it is ready again.
func killAgent(t *testing.T, n *cluster.Node) {
	t.Helper()
	pods, err := n.Client.CoreV1().Pods(releaseNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the node's agent pod: %v, %v", pods, err)
	}
	p := pods.Items[0]
	if len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("agent container statuses: %+v", p.Status.ContainerStatuses)
	}
	s := p.Status.ContainerStatuses[0]
	if _, err := n.Run(context.Background(), "ctr", "tasks", "kill", "--signal", "SIGKILL", strings.TrimPrefix(s.ContainerID, "containerd://")); err != nil {
		t.Fatal(err)
	}
	n.WaitPod(t, releaseNamespace, p.Name, 2*time.Minute, "restarted and Ready", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount > s.RestartCount && cluster.PodReady(p)
	})
}

// agentVolumes is the volumes the agent keeps in its data directory on the node, by
// the uid of their pod.
func agentVolumes(t *testing.T, n *cluster.Node) map[string]string {
	t.Helper()
	records, broken, err := store.Store{Root: filepath.Join(n.Dir, "trustsync-agent")}.List()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range records {
		out[r.Pod.UID] = r.Pod.String()
	}
	for _, dir := range broken {
		out["broken "+dir] = dir
	}
	return out
}

// Through the agent, an app asking for a reload URL on its loopback is told at its
// own address (the agent is not in its network namespace), once per change of what it
// trusts and not at start; a JKS store is written beside the PEM file; an anchor about
// to expire earns the pod a Warning Event from the agent.
func TestAgent_ReloadsTheAppAtItsOwnAddressAndWarnsOfExpiringAnchors(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "agent-reload", restricted)
	ctx := context.Background()
	rootA, rootB, rootC := fixtures.CA("agent-reload A"), fixtures.CA("agent-reload B"), fixtures.CA("agent-reload C")
	expiring := fixtures.MustNew(fixtures.Options{CommonName: "agent-reload expiring", NotAfter: time.Now().Add(72 * time.Hour)})
	ctb := createBundle(t, "e2e-agent-reload", rootA, expiring)
	// The reloadApp, listening on every address of the pod rather than its loopback,
	// and recording with each reload how many anchors ca.pem held when it came.
	app := strings.Replace(reloadApp, "httpd -f -p 127.0.0.1:8080", "httpd -f -p 8080", 1)
	app = strings.Replace(app, `echo url >> /tmp/reloads`, `echo url $(grep -c -- -----BEGIN `+mountPath+`/ca.pem) >> /tmp/reloads`, 1)
	createPod(t, ns, appPod("app", map[string]string{
		"trustsync.io/inject": "true", "trustsync.io/delivery": "node",
		"trustsync.io/sources": bundlesJSON(t,
			map[string]any{"name": "e2e-agent-reload", "path": "ca.pem"},
			map[string]any{"name": "e2e-agent-reload", "path": "truststore.jks", "format": "jks"}),
		"trustsync.io/reload-url": "http://127.0.0.1:8080/cgi-bin/reload",
	}, 1000, app))
	n.WaitPod(t, ns, "app", 2*time.Minute, "Ready", cluster.PodReady)
	reloads := func() string {
		t.Helper()
		out, err := n.Exec(ctx, ns, "app", "app", "cat", "/tmp/reloads")
		if err != nil {
			t.Fatalf("read the app's reloads: %v", err)
		}
		return strings.Join(strings.Split(strings.TrimSpace(out), "\n"), ", ")
	}
	// The start-up decision is made in the publish's first sync, logged before the
	// publish is.
	publish := publishLog(t, n, ns+"/app")
	if !strings.Contains(publish, "The app starts with the files as they are") || strings.Contains(publish, "What the app trusts or presents changed") {
		t.Fatalf("the agent's start-up decision for the pod is not the baseline; its log of the publish:\n%s", publish)
	}
	if _, err := n.Exec(ctx, ns, "app", "app", "test", "-s", mountPath+"/truststore.jks"); err != nil {
		t.Errorf("truststore.jks is missing or empty as the app sees it: %v", err)
	}
	// Two changes, one after the other: each reload records the anchors it found, so a
	// reload at start, or a second one for the first change, would stand before the
	// second change's.
	for _, anchors := range [][]*fixtures.Cert{{rootA, expiring, rootB}, {rootA, expiring, rootB, rootC}} {
		ctb.Spec.TrustBundle = pemOf(anchors...)
		var err error
		if ctb, err = n.Client.CertificatesV1().ClusterTrustBundles().Update(ctx, ctb, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		mark := fmt.Sprintf("url %d", len(anchors))
		poll.True(t, time.Minute, "a reload after the change to "+strconv.Itoa(len(anchors))+" anchors", func() bool { return strings.Contains(reloads(), mark) })
	}
	if got := reloads(); got != "url 3, url 4" {
		t.Errorf("reloads = %q, want one per change: %q", got, "url 3, url 4")
	}
	poll.True(t, time.Minute, "a TrustAnchorExpiring Warning from the agent", func() bool {
		events, err := n.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=app,reason=TrustAnchorExpiring"})
		if err != nil {
			return false
		}
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning && e.Source.Component == "trustsync-agent" && strings.Contains(e.Message, "agent-reload expiring") {
				return true
			}
		}
		return false
	})
}

// publishLog is the node agent's log from the publish before the pod's volume's up to
// the line saying pod (namespace/name) was published, waiting for that line.
func publishLog(t *testing.T, n *cluster.Node, pod string) string {
	t.Helper()
	pods, err := n.Client.CoreV1().Pods(releaseNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the node's agent pod: %v, %v", pods, err)
	}
	published := fmt.Sprintf("%q pod=%q", "Published volume", pod)
	var log string
	poll.True(t, time.Minute, "the agent's "+published, func() bool {
		log, err = n.Logs(context.Background(), releaseNamespace, pods.Items[0].Name, "agent")
		return err == nil && strings.Contains(log, published)
	})
	lines := strings.Split(log, "\n")
	end := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, published) })
	start := 0
	for i := end - 1; i >= 0; i-- {
		if strings.Contains(lines[i], `"Published volume"`) {
			start = i + 1
			break
		}
	}
	return strings.Join(lines[start:end+1], "\n")
}
