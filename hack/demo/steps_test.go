package demo

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

const namespace = "demo"

// demo holds what the steps share.
type demo struct {
	t       *testing.T
	cp      *controlplane.ControlPlane
	kube    kubernetes.Interface
	bundles *bundle.Store
}

// newDemo makes namespace demo with ServiceAccount web, and grants every
// ServiceAccount what an injected sidecar needs, as the chart's optional roles do.
func newDemo(t *testing.T, cp *controlplane.ControlPlane) *demo {
	ctx := context.Background()
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.CreateNamespace(ctx, namespace, nil); err != nil {
		t.Fatal(err)
	}
	if err := cp.CreateServiceAccount(ctx, namespace, "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "trustsync-sidecar"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"certificates.k8s.io", "trustsync.io"}, Resources: []string{"clustertrustbundles"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"create", "get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "trustsync-sidecar"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "trustsync-sidecar"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &demo{t: t, cp: cp, kube: client, bundles: bundle.NewStore(dyn, bundle.NativeV1)}
}

// waitForBundle waits until the named bundle holds at least n anchors.
func (d *demo) waitForBundle(ctx context.Context, name string, n int) string {
	var text string
	poll(d.t, "bundle "+name, func(ctx context.Context) (bool, error) {
		b, err := d.bundles.Get(ctx, name)
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
	if _, err := d.bundles.Create(ctx, &certificatesv1.ClusterTrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "corp-root"},
		Spec:       certificatesv1.ClusterTrustBundleSpec{TrustBundle: fixtures.Bundle(root)},
	}, metav1.CreateOptions{}); err != nil {
		d.t.Fatal(err)
	}
	showAnchors(fixtures.Bundle(root))
}

// createPod creates the annotated pod; the API server stores it injected.
func (d *demo) createPod(ctx context.Context) *corev1.Pod {
	annotations := map[string]string{
		"trustsync.io/inject": "true",
		"trustsync.io/bundles": `[{"signerName": "trustsync.io/workload", "labelSelector": {"matchLabels": {"kubernetes.io/cluster-trust-bundle-version": "live"}}, "path": "ca_certificates.pem"},
 {"name": "corp-root", "path": "ca_certificates.pem"}]`,
		"trustsync.io/ssl-cert-file":         "true",
		"trustsync.io/certificate":           "true",
		"trustsync.io/certificate-dns-names": "web.demo.svc",
	}
	for k, v := range annotations {
		show("  %s: %s", k, strings.Join(strings.Fields(v), " "))
	}
	pod, err := d.kube.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: annotations},
		Spec: corev1.PodSpec{
			ServiceAccountName: "web",
			SecurityContext:    &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000), RunAsNonRoot: ptr.To(true)},
			Containers:         []corev1.Container{{Name: "app", Image: "registry.example/web:1"}},
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

// runSidecar runs the injected sidecar with its flags, but for the two paths inside
// the container, as the pod's ServiceAccount.
func (d *demo) runSidecar(pod *corev1.Pod) *controlplane.Sidecar {
	var args []string
	for _, a := range pod.Spec.InitContainers[0].Args {
		if !strings.HasPrefix(a, "--dir=") && !strings.HasPrefix(a, "--state-dir=") {
			args = append(args, a)
		}
	}
	return d.cp.StartSidecar(d.t, namespace, pod.Spec.ServiceAccountName, pod, args...)
}

// verify checks the sidecar's certificate against its own trust file.
func (d *demo) verify(s *controlplane.Sidecar) *x509.Certificate {
	chain, _ := s.Read("tls.crt")
	trust, _ := s.Read("ca_certificates.pem")
	certs, err := bundle.ParseCertificates(chain)
	if err != nil || len(certs) == 0 {
		d.t.Fatalf("tls.crt: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(trust)
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: "web.demo.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		d.t.Fatalf("the workload certificate does not verify against the trust file: %v", err)
	}
	return certs[0]
}

func (d *demo) rotate(ctx context.Context) {
	secrets := d.kube.CoreV1().Secrets("trustsync-system")
	s, err := secrets.Get(ctx, "trustsync-ca-trustsync.io-workload", metav1.GetOptions{})
	if err != nil {
		d.t.Fatal(err)
	}
	s.Annotations["trustsync.io/rotate-requested-at"] = time.Now().UTC().Format(time.RFC3339)
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		d.t.Fatal(err)
	}
}

// waitForFile waits until the trust file holds n anchors.
func (d *demo) waitForFile(s *controlplane.Sidecar, n int) {
	poll(d.t, "the trust file to follow the rotation", func(context.Context) (bool, error) {
		data, err := s.Read("ca_certificates.pem")
		if err != nil {
			return false, nil
		}
		certs, _ := bundle.ParseCertificates(data)
		return len(certs) == n, nil
	})
}
