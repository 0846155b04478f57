package demo

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

const (
	namespace     = "demo"
	mountPath     = "/var/run/trust-anchors"
	anchorsVolume = "trustsync-anchors"
	liveBundle    = "trustsync.io:workload:live"
)

// demo holds what the steps share.
type demo struct {
	t    *testing.T
	node *cluster.Node
}

// run runs one of the node's tools, failing the demo with its error output.
func (d *demo) run(ctx context.Context, tool string, args ...string) string {
	d.t.Helper()
	out, err := d.node.Run(ctx, tool, args...)
	if err != nil {
		d.t.Fatal(err)
	}
	return out
}

// kubectl runs kubectl and prints its output, indented.
func (d *demo) kubectl(ctx context.Context, args ...string) {
	d.t.Helper()
	fmt.Println(indent(d.run(ctx, "kubectl", args...), "      "))
}

// exec runs a command in the web pod's app container.
func (d *demo) exec(ctx context.Context, command ...string) string {
	d.t.Helper()
	out, err := d.node.Exec(ctx, namespace, "web", "app", command...)
	if err != nil {
		d.t.Fatal(err)
	}
	return out
}

// liveBundle waits until the signer's live bundle holds at least n anchors.
func (d *demo) liveBundle(ctx context.Context, n int) string {
	var text string
	poll.NoError(d.t, 2*time.Minute, "bundle "+liveBundle, func(ctx context.Context) (bool, error) {
		b, err := d.node.Client.CertificatesV1().ClusterTrustBundles().Get(ctx, liveBundle, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		certs, _ := bundle.ParseCertificates([]byte(b.Spec.TrustBundle))
		text = b.Spec.TrustBundle
		return len(certs) >= n, nil
	})
	return text
}

func (d *demo) createCorpRoot(ctx context.Context) {
	root := fixtures.CA("Example Corp Root CA")
	if _, err := d.node.Client.CertificatesV1().ClusterTrustBundles().Create(ctx, &certificatesv1.ClusterTrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "corp-root"},
		Spec:       certificatesv1.ClusterTrustBundleSpec{TrustBundle: fixtures.Bundle(root)},
	}, metav1.CreateOptions{}); err != nil {
		d.t.Fatal(err)
	}
	showAnchors(fixtures.Bundle(root))
}

// createPod creates namespace demo (enforcing the restricted Pod Security profile),
// ServiceAccount web and the annotated pod; the API server stores it injected.
func (d *demo) createPod(ctx context.Context) *corev1.Pod {
	core := d.node.Client.CoreV1()
	if _, err := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: namespace, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}, metav1.CreateOptions{}); err != nil {
		d.t.Fatal(err)
	}
	if _, err := core.ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, metav1.CreateOptions{}); err != nil {
		d.t.Fatal(err)
	}
	annotations := map[string]string{
		"trustsync.io/inject": "true",
		"trustsync.io/sources": `[{"signerName": "trustsync.io/workload", "labelSelector": {"matchLabels": {"kubernetes.io/cluster-trust-bundle-version": "live"}}, "path": "ca_certificates.pem"},
 {"name": "corp-root", "path": "ca_certificates.pem"}]`,
		"trustsync.io/ssl-cert-file":         "true",
		"trustsync.io/certificate":           "true",
		"trustsync.io/certificate-dns-names": "web.demo.svc",
	}
	for _, k := range []string{"trustsync.io/inject", "trustsync.io/sources", "trustsync.io/ssl-cert-file", "trustsync.io/certificate", "trustsync.io/certificate-dns-names"} {
		show("  %s: %s", k, strings.Join(strings.Fields(annotations[k]), " "))
	}
	pod, err := core.Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: annotations},
		Spec: corev1.PodSpec{
			ServiceAccountName:            "web",
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000), RunAsNonRoot: ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "app", Image: cluster.ShellImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", `n=$(grep -c "BEGIN CERTIFICATE" "$SSL_CERT_FILE") && echo "FIRST-READ $n" || echo FIRST-READ-FAILED; exec sleep 3600`},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		d.t.Fatal(err)
	}
	if len(pod.Spec.InitContainers) == 0 {
		d.t.Fatal("the pod was not injected")
	}
	return pod
}

func (d *demo) waitReady(ctx context.Context) {
	d.node.WaitPod(d.t, namespace, "web", 2*time.Minute, "Ready", cluster.PodReady)
}

// firstRead is the number of anchors the app found on its first read, from its log.
func (d *demo) firstRead(ctx context.Context) int {
	logs, err := d.node.Logs(ctx, namespace, "web", "app")
	if err != nil {
		d.t.Fatal(err)
	}
	_, count, ok := strings.Cut(strings.TrimSpace(logs), "FIRST-READ ")
	n, err := strconv.Atoi(count)
	if !ok || err != nil || n == 0 {
		d.t.Fatalf("the app's first read failed; its log:\n%s", logs)
	}
	return n
}

// verify reads tls.crt and tls.key as the app and checks the certificate against
// the trust file's text.
func (d *demo) verify(ctx context.Context, trust string) *x509.Certificate {
	d.t.Helper()
	certs, err := bundle.ParseCertificates([]byte(d.exec(ctx, "cat", mountPath+"/tls.crt")))
	if err != nil || len(certs) == 0 {
		d.t.Fatalf("tls.crt: %v", err)
	}
	if key := d.exec(ctx, "cat", mountPath+"/tls.key"); !strings.Contains(key, "PRIVATE KEY") {
		d.t.Fatalf("tls.key as the app reads it holds no private key:\n%s", key)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(trust))
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: "web.demo.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		d.t.Fatalf("the workload certificate does not verify against the trust file: %v", err)
	}
	return certs[0]
}

func (d *demo) rotate(ctx context.Context) {
	secrets := d.node.Client.CoreV1().Secrets("trustsync-system")
	s, err := secrets.Get(ctx, "trustsync-ca-trustsync.io-workload", metav1.GetOptions{})
	if err != nil {
		d.t.Fatal(err)
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations["trustsync.io/rotate-requested-at"] = time.Now().UTC().Format(time.RFC3339)
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		d.t.Fatal(err)
	}
}

// waitForAnchors waits until the trust file, as the app reads it, holds n anchors.
func (d *demo) waitForAnchors(ctx context.Context, n int) string {
	var text string
	poll.NoError(d.t, 2*time.Minute, "the app's trust file to follow the rotation", func(ctx context.Context) (bool, error) {
		out, err := d.node.Exec(ctx, namespace, "web", "app", "cat", mountPath+"/ca_certificates.pem")
		if err != nil {
			return false, nil
		}
		certs, _ := bundle.ParseCertificates([]byte(out))
		text = out
		return len(certs) == n, nil
	})
	return text
}

// createAPIPods creates demo/api (delivery node) and demo/legacy (the kubelet's own
// projection, written by hand), trusting what web trusts, and waits until both run.
// app is a restricted pod's spec whose one container, app, sleeps as uid 1000.
func app() corev1.PodSpec {
	return corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To(int64(1)),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000), RunAsNonRoot: ptr.To(true),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name: "app", Image: cluster.ShellImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		}},
	}
}

// createPartnerPod creates demo/partner, delivery node, trusting trust domain
// b.example's imported bundle, and waits until it is Ready.
func (d *demo) createPartnerPod(ctx context.Context) {
	partner := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "partner", Annotations: map[string]string{
		"trustsync.io/inject":         "true",
		"trustsync.io/delivery":       "node",
		"trustsync.io/signer-name":    "trustsync.io/federated",
		"trustsync.io/label-selector": "trustsync.io/trust-domain=b.example",
	}}, Spec: app()}
	if _, err := d.node.Client.CoreV1().Pods(namespace).Create(ctx, partner, metav1.CreateOptions{}); err != nil {
		d.t.Fatal(err)
	}
	d.node.WaitPod(d.t, namespace, "partner", 2*time.Minute, "Ready", cluster.PodReady)
}

func (d *demo) createAPIPods(ctx context.Context) *corev1.Pod {
	core := d.node.Client.CoreV1()
	api := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "api", Annotations: map[string]string{
		"trustsync.io/inject":   "true",
		"trustsync.io/delivery": "node",
		"trustsync.io/sources":  `[{"signerName": "trustsync.io/workload", "labelSelector": {"matchLabels": {"kubernetes.io/cluster-trust-bundle-version": "live"}}, "path": "ca_certificates.pem"}, {"name": "corp-root", "path": "ca_certificates.pem"}]`,
	}}, Spec: app()}
	legacy := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}, Spec: app()}
	legacy.Spec.Volumes = []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{SignerName: ptr.To("trustsync.io/workload"),
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/cluster-trust-bundle-version": "live"}}, Path: "workload.pem"}},
		{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To("corp-root"), Path: "corp.pem"}},
	}}}}}
	legacy.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "roots", MountPath: "/etc/roots", ReadOnly: true}}
	var created *corev1.Pod
	for _, p := range []*corev1.Pod{api, legacy} {
		out, err := core.Pods(namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			d.t.Fatal(err)
		}
		if p == api {
			created = out
		}
	}
	for _, name := range []string{"api", "legacy"} {
		d.node.WaitPod(d.t, namespace, name, 2*time.Minute, "Ready", cluster.PodReady)
	}
	return created
}

// plugin runs kubectl trustsync and prints what it answered; exit 3 (answered, not
// everywhere) is an answer.
func (d *demo) plugin(ctx context.Context, args ...string) string {
	d.t.Helper()
	out, err := d.node.Run(ctx, "kubectl", append([]string{"trustsync"}, args...)...)
	if err != nil && !strings.Contains(err.Error(), "exit status 3") {
		d.t.Fatal(err)
	}
	fmt.Println(indent(out, "      "))
	return out
}

// waitPlugin waits until kubectl trustsync status shows n files of namespace demo up to date.
func (d *demo) waitPlugin(ctx context.Context, n int) {
	poll.NoError(d.t, 2*time.Minute, "the agent to report the demo's pods", func(ctx context.Context) (bool, error) {
		out, _ := d.node.Run(ctx, "kubectl", "trustsync", "status", "-n", namespace)
		return strings.Count(out, "UpToDate") >= n, nil
	})
}

// waitRotation waits until kubectl trustsync rotation's answer satisfies done.
func (d *demo) waitRotation(ctx context.Context, done func(string) bool) {
	poll.NoError(d.t, 2*time.Minute, "the rotation", func(ctx context.Context) (bool, error) {
		out, _ := d.node.Run(ctx, "kubectl", "trustsync", "rotation")
		return done(out), nil
	})
}

// corpRootID is the corporate root's anchor id.
func (d *demo) corpRootID(ctx context.Context) string {
	b, err := d.node.Client.CertificatesV1().ClusterTrustBundles().Get(ctx, "corp-root", metav1.GetOptions{})
	if err != nil {
		d.t.Fatal(err)
	}
	certs, err := bundle.ParseCertificates([]byte(b.Spec.TrustBundle))
	if err != nil || len(certs) != 1 {
		d.t.Fatalf("corp-root: %v", err)
	}
	return bundle.AnchorID(certs[0].Raw)
}

// createTrustTarget has trustsync-controller keep the signer's live bundle as
// ConfigMap trust in namespace demo.
func (d *demo) createTrustTarget(ctx context.Context) {
	target := `apiVersion: trustsync.io/v1alpha1
kind: TrustTarget
metadata: {name: workload-ca}
spec:
  sources:
  - signerName: trustsync.io/workload
    labelSelector: {matchLabels: {kubernetes.io/cluster-trust-bundle-version: live}}
    path: ca.crt
  target:
    configMap: {name: trust}
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: demo}}
`
	fmt.Println(indent(target, "      "))
	file := filepath.Join(d.t.TempDir(), "target.yaml")
	if err := os.WriteFile(file, []byte(target), 0o644); err != nil {
		d.t.Fatal(err)
	}
	d.run(ctx, "kubectl", "apply", "-f", file)
}

// waitConfigMap waits until ConfigMap demo/trust holds n certificates.
func (d *demo) waitConfigMap(ctx context.Context, n int) int {
	poll.NoError(d.t, 2*time.Minute, "ConfigMap demo/trust", func(ctx context.Context) (bool, error) {
		cm, err := d.node.Client.CoreV1().ConfigMaps(namespace).Get(ctx, "trust", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		certs, _ := bundle.ParseCertificates([]byte(cm.Data["ca.crt"]))
		return len(certs) == n, nil
	})
	return n
}
