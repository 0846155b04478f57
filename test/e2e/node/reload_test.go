package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/truststore"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// reloadApp serves a reload URL on the pod's loopback (busybox httpd running a CGI
// script) and traps SIGHUP, and records each reload it receives, with how it came,
// in /tmp/reloads.
const reloadApp = `set -e
mkdir -p /tmp/www/cgi-bin
printf '#!/bin/sh\necho url >> /tmp/reloads\nprintf "Content-Type: text/plain\\r\\n\\r\\nreloaded\\n"\n' > /tmp/www/cgi-bin/reload
chmod +x /tmp/www/cgi-bin/reload
: > /tmp/reloads
trap 'echo signal >> /tmp/reloads' HUP
httpd -f -p 127.0.0.1:8080 -h /tmp/www &
while true; do sleep 1 & wait $! || true; done`

// The app hears of every change of what it trusts, once, and of nothing else: one
// reload by URL and one by signal per change of the set of anchors, none for files
// rewritten with the same set (a reordered bundle, a truststore re-encoded under a
// new password), none at start or when the sidecar restarts. The Java truststores the sidecar writes beside the
// PEM file are read by keytool and trusted by a Java TLS client, and take the new
// anchor after the edit; an anchor about to expire earns the pod one Warning Event.
func TestPod_AppIsReloadedOncePerAnchorSetChangeAndReadsJavaTruststores(t *testing.T) {
	java := javaTools(t)
	n := installChart(t)
	ns := n.Namespace(t, "reload", restricted)
	ctx := context.Background()
	rootA, rootB := fixtures.CA("reload root A"), fixtures.CA("reload root B")
	expiring := fixtures.MustNew(fixtures.Options{CommonName: "reload expiring root", NotAfter: time.Now().Add(72 * time.Hour)})
	ctb := createBundle(t, "e2e-reload", rootA, expiring)
	storePassword(t, n, ns, "first-password")

	pod := appPod("app", map[string]string{
		"trustsync.io/inject": "true",
		// The sources list's former name: pods written before the rename still work.
		"trustsync.io/bundles": bundlesJSON(t,
			map[string]any{"name": "e2e-reload", "path": "ca.pem"},
			map[string]any{"name": "e2e-reload", "path": "truststore.p12", "format": "pkcs12", "passwordSecret": map[string]string{"name": "store-pass", "key": "password"}},
			map[string]any{"name": "e2e-reload", "path": "truststore.jks", "format": "jks"}),
		"trustsync.io/reload-url":    "http://127.0.0.1:8080/cgi-bin/reload",
		"trustsync.io/reload-signal": "SIGHUP",
	}, 1000, reloadApp)
	// The same pod withholding its token is refused: its app, sharing the sidecar's
	// process namespace and user, could read the token meant for the sidecar alone.
	withheld := pod.DeepCopy()
	withheld.Name, withheld.Spec.AutomountServiceAccountToken = "app-without-token", ptr.To(false)
	if _, err := n.Client.CoreV1().Pods(ns).Create(ctx, withheld, metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "automountServiceAccountToken: false, so the sidecar alone holds a token") || !strings.Contains(err.Error(), "use trustsync.io/reload-url") {
		t.Fatalf("a pod withholding its token with reload-signal: err = %v, want it refused, pointing to reload-url", err)
	}
	created := createPod(t, ns, pod)
	n.WaitPod(t, ns, "app", 2*time.Minute, "Ready", cluster.PodReady)
	if !*created.Spec.ShareProcessNamespace {
		t.Fatal("the injected pod does not share its process namespace")
	}
	reloads := func() []string {
		t.Helper()
		out, err := n.Exec(ctx, ns, "app", "app", "cat", "/tmp/reloads")
		if err != nil {
			t.Fatalf("read the app's reloads: %v", err)
		}
		return strings.Fields(out)
	}
	// The sidecar decides to tell the app when it writes a change, and says so in its
	// log ("changed; it will be told"), a couple of seconds before it tells it; so
	// once the write a step caused is in the log, the decision is too, and the
	// count of such decisions says whether a reload is coming. sidecarLog waits for
	// the log to hold mark at least times times.
	sidecarLog := func(mark string, times int) string {
		t.Helper()
		var log string
		poll.True(t, time.Minute, fmt.Sprintf("%d×%q in the sidecar's log", times, mark), func() bool {
			var err error
			log, err = n.Logs(ctx, ns, "app", "trustsync")
			return err == nil && strings.Count(log, mark) >= times
		})
		return log
	}
	const (
		started = "Start-up done"
		wrote   = "Wrote trust files"
		decided = "What the app trusts or presents changed"
		told    = "Told the app that its trust or certificate changed"
	)
	if log := sidecarLog(started, 1); strings.Contains(log, decided) || len(reloads()) != 0 {
		t.Fatalf("the app is to be reloaded at start: %q; the sidecar's log:\n%s", reloads(), log)
	}

	// Each step builds on the one before: the first to fail ends the test.
	if !t.Run("the stores hold every anchor under its alias and a Java client trusts them", func(t *testing.T) {
		for _, s := range []struct{ file, typ, password string }{{"truststore.p12", "PKCS12", "first-password"}, {"truststore.jks", "JKS", "changeit"}} {
			store := copyOut(t, n, ns, s.file)
			java.assertEntries(t, store, s.typ, s.password, rootA, expiring)
			java.assertTrusts(t, store, s.typ, s.password, rootA, true)
			java.assertTrusts(t, store, s.typ, s.password, rootB, false)
		}
	}) {
		return
	}

	if !t.Run("files rewritten with the same set reload nothing", func(t *testing.T) {
		p12 := sha256In(t, n, ns, "truststore.p12")
		before, err := n.Logs(ctx, ns, "app", "trustsync")
		if err != nil {
			t.Fatal(err)
		}
		ctb.Spec.TrustBundle = pemOf(expiring, rootA) // the same anchors, in another order
		if ctb, err = n.Client.CertificatesV1().ClusterTrustBundles().Update(ctx, ctb, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		storePassword(t, n, ns, "second-password")
		poll.True(t, time.Minute, "the store re-encoded under the new password", func() bool { return sha256In(t, n, ns, "truststore.p12") != p12 })
		// The re-encoding's write is logged after its decision. (A decision on the
		// reordered bundle, which came first on the same watch, shows in the next
		// step's count of decisions.)
		if log := sidecarLog(wrote, strings.Count(before, wrote)+1); strings.Contains(log, decided) || len(reloads()) != 0 {
			t.Fatalf("the app is to be reloaded for the same set of anchors: %q; the sidecar's log:\n%s", reloads(), log)
		}
	}) {
		return
	}

	if !t.Run("a new anchor reloads the app once by URL and once by signal", func(t *testing.T) {
		ctb.Spec.TrustBundle = pemOf(rootA, expiring, rootB)
		if _, err := n.Client.CertificatesV1().ClusterTrustBundles().Update(ctx, ctb, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		poll.True(t, time.Minute, "one reload by URL and one by signal", func() bool { return len(reloads()) >= 2 })
		// The round is over, and it was the only decision to reload since start.
		if log := sidecarLog(told, 1); strings.Count(log, decided) != 1 {
			t.Fatalf("the sidecar decided to reload %d times for one change of the set; its log:\n%s", strings.Count(log, decided), log)
		}
		got := strings.Join(reloads(), " ")
		if strings.Count(got, "url") != 1 || strings.Count(got, "signal") != 1 {
			t.Fatalf("reloads after one change of the set: %q, want one url and one signal", got)
		}
		for _, s := range []struct{ file, typ, password string }{{"truststore.p12", "PKCS12", "second-password"}, {"truststore.jks", "JKS", "changeit"}} {
			store := copyOut(t, n, ns, s.file)
			java.assertEntries(t, store, s.typ, s.password, rootA, expiring, rootB)
			java.assertTrusts(t, store, s.typ, s.password, rootB, true)
		}
	}) {
		return
	}

	if !t.Run("a restarted sidecar takes what is on disk as what the app has: no reload", func(t *testing.T) {
		killSidecar(t, n, ns, "app")
		// The restarted sidecar's log is its own: its start-up sync, decisions
		// included, is done.
		if log := sidecarLog(started, 1); strings.Contains(log, decided) {
			t.Fatalf("the restarted sidecar decided to reload the app; its log:\n%s", log)
		}
		if got := strings.Join(reloads(), " "); got != "url signal" && got != "signal url" {
			t.Fatalf("reloads after the sidecar restarted: %q, want still the one of each from the change before", got)
		}
	}) {
		return
	}

	t.Run("the expiring anchor earned one Warning Event, through a sidecar restart too, and the reload a Normal one", func(t *testing.T) {
		events, err := n.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(created.UID)})
		if err != nil {
			t.Fatal(err)
		}
		var warned, reloaded int32
		var all []string
		for _, e := range events.Items {
			all = append(all, fmt.Sprintf("%s %s (x%d): %s", e.Type, e.Reason, e.Count, e.Message))
			switch e.Reason {
			case "TrustAnchorExpiring":
				warned += max(e.Count, 1)
				if e.Type != corev1.EventTypeWarning || !strings.Contains(e.Message, "reload expiring root") || !strings.Contains(e.Message, "ca.pem, truststore.jks, truststore.p12") {
					t.Errorf("expiry event %q", e.Message)
				}
			case "TrustReloaded":
				reloaded += max(e.Count, 1)
			}
		}
		if warned != 1 || reloaded != 1 {
			t.Fatalf("%d expiry warnings and %d reload events, want one each; the pod's events:\n%s", warned, reloaded, strings.Join(all, "\n"))
		}
	})
}

// storePassword writes the truststore password Secret and lets the pod's
// ServiceAccount read that one Secret, as docs/sidecar.md tells users to.
func storePassword(t *testing.T, n *cluster.Node, ns, password string) {
	t.Helper()
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "store-pass"}, Data: map[string][]byte{"password": []byte(password)}}
	secrets := n.Client.CoreV1().Secrets(ns)
	if _, err := secrets.Update(ctx, secret, metav1.UpdateOptions{}); err == nil {
		return
	}
	if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "read-store-pass"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"store-pass"}, Verbs: []string{"get", "list", "watch"},
	}}}
	if _, err := n.Client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "read-store-pass"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "read-store-pass"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: ns}},
	}
	if _, err := n.Client.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// copyOut copies a file of the trust volume, as the app container sees it, to the
// test's directory.
func copyOut(t *testing.T, n *cluster.Node, ns, file string) string {
	t.Helper()
	out, err := n.Exec(context.Background(), ns, "app", "app", "base64", mountPath+"/"+file)
	if err != nil {
		t.Fatalf("read %s in the app container: %v", file, err)
	}
	data, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(out), ""))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), file)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func sha256In(t *testing.T, n *cluster.Node, ns, file string) string {
	t.Helper()
	out, err := n.Exec(context.Background(), ns, "app", "app", "sha256sum", mountPath+"/"+file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(out)[0]
}

// java runs a real Java runtime: keytool, and a TLS client (TrustCheck.java, run by
// the source launcher) that trusts only the store it is given.
type java struct{ keytool, java string }

func javaTools(t *testing.T) java {
	t.Helper()
	find := func(name string) string {
		path, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("%s not found: hack/node.sh installs Debian's default-jdk-headless for these tests (%v)", name, err)
		}
		return path
	}
	return java{keytool: find("keytool"), java: find("java")}
}

// assertEntries lists the store with keytool: exactly the anchors, each a trusted
// certificate entry under its alias.
func (j java) assertEntries(t *testing.T, store, typ, password string, anchors ...*fixtures.Cert) {
	t.Helper()
	out, err := exec.Command(j.keytool, "-list", "-keystore", store, "-storetype", typ, "-storepass", password).CombinedOutput()
	if err != nil {
		t.Fatalf("keytool -list %s: %v\n%s", filepath.Base(store), err, out)
	}
	if want := fmt.Sprintf("Your keystore contains %d entries", len(anchors)); !strings.Contains(string(out), want) {
		t.Errorf("keytool on %s: want %q:\n%s", filepath.Base(store), want, out)
	}
	for _, a := range anchors {
		if alias := truststore.Alias(tsbundle.NewAnchor(a.Cert.Raw)); !strings.Contains(string(out), alias+", ") || !strings.Contains(string(out), "trustedCertEntry") {
			t.Errorf("keytool on %s lists no trusted entry %q:\n%s", filepath.Base(store), alias, out)
		}
	}
}

// assertTrusts runs a Java TLS client trusting only store against a server whose
// certificate is issued by root, and checks the handshake succeeds exactly when want.
func (j java) assertTrusts(t *testing.T, store, typ, password string, root *fixtures.Cert, want bool) {
	t.Helper()
	leaf := fixtures.MustNew(fixtures.Options{CommonName: "localhost", Leaf: true, Parent: root, DNSNames: []string{"localhost"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Cert.Raw}, PrivateKey: leaf.Key}}}
	srv.StartTLS()
	defer srv.Close()
	url := "https://localhost:" + srv.URL[strings.LastIndex(srv.URL, ":")+1:] + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, j.java, "-Djavax.net.ssl.trustStore="+store, "-Djavax.net.ssl.trustStoreType="+typ,
		"-Djavax.net.ssl.trustStorePassword="+password, "testdata/TrustCheck.java", url).CombinedOutput()
	ok := err == nil && strings.Contains(string(out), "HANDSHAKE-OK")
	if ok != want {
		t.Errorf("Java client with %s against a server issued by %q: handshake ok = %v, want %v\n%s", filepath.Base(store), root.Cert.Subject.CommonName, ok, want, out)
	}
}

// BenchmarkReload_BundleEditToApp measures, per edit of a bundle, the time from the
// update call until the app has handled its reload signal: the sidecar's watch and
// write, and the signal's delivery. Each edit comes after a quiet spell longer than
// the pod's reload pacing (the default, 2 s), as a bundle edit or a rotation's step
// does: what an app waits for the first change of a burst. The app logs the anchor its file holds
// when the SIGHUP arrives (as watchScript's lines, so seenAt finds it); the container
// runtime timestamps the line as it reads it.
func BenchmarkReload_BundleEditToApp(b *testing.B) {
	n := installChart(b)
	reloadBenchRuns++
	ns := n.Namespace(b, fmt.Sprintf("reload-bench-%d", reloadBenchRuns), restricted)
	name := fmt.Sprintf("e2e-reload-bench-%d", reloadBenchRuns)
	createBundle(b, name, fixtures.CA("reload bench first"))
	file := mountPath + "/ca_certificates.pem"
	createPod(b, ns, appPod("app", map[string]string{
		"trustsync.io/inject": "true", "trustsync.io/bundle-name": name, "trustsync.io/reload-signal": "SIGHUP",
	}, 1000, `trap 'echo "SEEN reload $(sed -n 2p `+file+`)"' HUP
while true; do sleep 1 & wait $! || true; done`))
	n.WaitPod(b, ns, "app", 2*time.Minute, "Ready", cluster.PodReady)
	var took []time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		time.Sleep(contract.DefaultReloadSettle + 500*time.Millisecond)
		b.StartTimer()
		marker, start := replaceAnchor(b, n, name)
		d := seenAt(b, ns, "app", "reload "+marker, time.Minute).Sub(start)
		b.Logf("edit %d: the app handled its reload %.2fs after the update call began", i+1, d.Seconds())
		took = append(took, d)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(took).Seconds(), "s/edit-to-reload")
	b.ReportMetric(slices.Max(took).Seconds(), "s/edit-to-reload-max")
}

// reloadBenchRuns numbers the benchmark's runs, each with its own namespace and bundle.
var reloadBenchRuns int
