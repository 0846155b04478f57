package demo

import (
	"context"
	"crypto/x509"
	"fmt"
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
	poll(d.t, "bundle "+liveBundle, func(ctx context.Context) (bool, error) {
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
	poll(d.t, "the app's trust file to follow the rotation", func(ctx context.Context) (bool, error) {
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
