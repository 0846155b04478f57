package signer

import (
	"context"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/test/controlplane"
)

// liveProjection selects the workload signer's live bundle, as pods do.
const liveProjection = `[{"signerName": "trustsync.io/workload", "labelSelector": {"matchLabels": {"kubernetes.io/cluster-trust-bundle-version": "live"}}, "path": "ca_certificates.pem"}]`

// sidecarRBAC gives every ServiceAccount what an injected sidecar needs: read bundles
// (the chart's default, upstream's "bundles are public"), and record Events in apps.
func sidecarRBAC(t testing.TB, cp *controlplane.ControlPlane) {
	t.Helper()
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	all := []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts"}}
	_, err := client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "bundle-reader"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"certificates.k8s.io", "trustsync.io"}, Resources: []string{"clustertrustbundles"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bundle-readers"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "bundle-reader"}, Subjects: all}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func podAs(t testing.TB, cp *controlplane.ControlPlane, name, sa string, annotations ...map[string]string) *corev1.Pod {
	t.Helper()
	if err := cp.CreateServiceAccount(context.Background(), appNamespace, sa); err != nil {
		t.Fatal(err)
	}
	pod, err := kube(t, cp.AdminConfig()).CoreV1().Pods(appNamespace).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: firstOrNil(annotations)},
		Spec:       corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// injectedSidecar runs the sidecar with exactly the flags the injector gives pod's
// annotations, but for --dir and --state-dir, which are paths inside the container.
func injectedSidecar(t testing.TB, cp *controlplane.ControlPlane, pod *corev1.Pod) *controlplane.Sidecar {
	t.Helper()
	res, err := injector.Inject(pod, appNamespace, nil, injector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	injected, err := res.Apply(pod)
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, a := range injected.Spec.InitContainers[0].Args {
		if !strings.HasPrefix(a, contract.Flag(contract.FlagDir, "")) && !strings.HasPrefix(a, contract.Flag(contract.FlagStateDir, "")) {
			args = append(args, a)
		}
	}
	return cp.StartSidecar(t, appNamespace, pod.Spec.ServiceAccountName, pod, args...)
}

func certSidecar(t testing.TB, cp *controlplane.ControlPlane, pod *corev1.Pod, extra ...string) *controlplane.Sidecar {
	t.Helper()
	args := append([]string{"run", contract.Flag(contract.FlagSources, liveProjection), "--" + contract.FlagCertificate, contract.Flag(contract.FlagTrustDomain, "cluster.local")}, extra...)
	return cp.StartSidecar(t, appNamespace, pod.Spec.ServiceAccountName, pod, args...)
}

func firstOrNil(m []map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m[0]
}

// The whole loop, both modes: an injected pod's sidecar, with the flags the injector
// gives it and the pod's ServiceAccount, obtains a certificate from the real signer
// whose chain verifies against the trust file the same sidecar writes.
func TestWorkloadCertificate_VerifiesAgainstTheTrustFile(t *testing.T) {
	for _, native := range []bool{true, false} {
		t.Run(mode(native), func(t *testing.T) {
			cp := planes.Get(t, native)
			sidecarRBAC(t, cp)
			pod := podAs(t, cp, "cert-"+mode(native), "web", map[string]string{
				"trustsync.io/inject": "true", "trustsync.io/signer-name": workload,
				"trustsync.io/label-selector":                 "kubernetes.io/cluster-trust-bundle-version=live",
				"trustsync.io/certificate":                    "true",
				"trustsync.io/certificate-dns-names":          "web.apps.svc",
				"trustsync.io/certificate-expiration-seconds": "3600",
				"trustsync.io/certificate-credential-bundle":  "true",
			})
			s := injectedSidecar(t, cp, pod)

			chain := s.WaitForContent(t, "tls.crt")
			key := s.WaitForContent(t, "tls.key")
			trust := s.WaitForContent(t, "ca_certificates.pem")
			certs, err := bundle.ParseCertificates(chain)
			if err != nil {
				t.Fatal(err)
			}
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(trust)
			if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: "web.apps.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				t.Fatalf("the certificate does not verify against the trust file: %v", err)
			}
			if got := certs[0].URIs[0].String(); got != spiffe(appNamespace, "web") {
				t.Errorf("identity = %s", got)
			}
			if got := certs[0].NotAfter.Sub(certs[0].NotBefore); got != time.Hour+5*time.Minute {
				t.Errorf("lifetime = %s, want the hour asked for plus the backdate", got)
			}
			if info, err := os.Stat(filepath.Join(s.Dir, "tls.key")); err != nil || info.Mode().Perm() != 0o600 {
				t.Errorf("tls.key mode = %v, %v; want 0600", info.Mode(), err)
			}
			if cred, _ := s.Read("credential.pem"); !strings.HasPrefix(string(cred), string(key)) || !strings.HasSuffix(string(cred), string(chain)) {
				t.Error("credential.pem is not the key followed by the chain")
			}
			bin, _ := controlplane.BuildBinary("sidecar")
			if out, err := exec.Command(bin, "probe", contract.Flag(contract.FlagDir, s.Dir), contract.Flag(contract.FlagSources, injectedSources(t, pod)), "--"+contract.FlagCertificate).CombinedOutput(); err != nil {
				t.Errorf("probe with the certificate written: %v %s", err, out)
			}
		})
	}
}

// injectedSources is the sources list the injector gives pod.
func injectedSources(t testing.TB, pod *corev1.Pod) string {
	res, err := injector.Inject(pod, appNamespace, nil, injector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	injected, _ := res.Apply(pod)
	for _, a := range injected.Spec.InitContainers[0].Args {
		if v, ok := strings.CutPrefix(a, contract.Flag(contract.FlagSources, "")); ok {
			return v
		}
	}
	t.Fatal("the injector gave the sidecar no sources list")
	return ""
}

// csrsOf lists the CSRs a pod's sidecar made (named trustsync-<pod>-<hash>).
func csrsOf(t testing.TB, cp *controlplane.ControlPlane, pod *corev1.Pod) []string {
	t.Helper()
	list, err := kube(t, cp.AdminConfig()).CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range list.Items {
		if strings.HasPrefix(c.Name, "trustsync-"+pod.Name+"-") {
			names = append(names, c.Name)
		}
	}
	return names
}

// Killed while its request is pending and started again, the sidecar resumes the same
// request: same key from its state directory, same CSR name, no second CSR.
func TestWorkloadCertificate_RestartWhilePendingMakesNoSecondCSR(t *testing.T) {
	cp := planes.Get(t, true)
	sidecarRBAC(t, cp)
	pod := podAs(t, cp, "cert-restart", "web")
	// No signer serves example.com/nobody: the request stays pending.
	first := certSidecar(t, cp, pod, contract.Flag(contract.FlagCertificateSigner, "example.com/nobody"))
	var names []string
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		names = csrsOf(t, cp, pod)
		return len(names) == 1, nil
	}); err != nil {
		t.Fatalf("no pending CSR: %v", err)
	}
	first.Process.Kill()

	second := certSidecar(t, cp, pod, contract.Flag(contract.FlagCertificateSigner, "example.com/nobody"), contract.Flag(contract.FlagStateDir, first.StateDir))
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(second.Process.Tail(), "Resuming the pending certificate request"), nil
	}); err != nil {
		t.Fatalf("the restarted sidecar did not resume: %v", err)
	}
	if again := csrsOf(t, cp, pod); !slices.Equal(again, names) {
		t.Errorf("CSRs after the restart = %q, want only %q", again, names)
	}
}

// A denied request leaves no key or certificate in the app's volume, and says why on
// the pod.
func TestWorkloadCertificate_DeniedLeavesNothingAndRecordsAnEvent(t *testing.T) {
	cp := planes.Get(t, true)
	sidecarRBAC(t, cp)
	pod := podAs(t, cp, "cert-denied", "web")
	s := certSidecar(t, cp, pod, contract.Flag(contract.FlagCertificateDNSNames, "web.payments.svc"))
	var message string
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := kube(t, cp.AdminConfig()).CoreV1().Events(appNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(pod.UID) + ",reason=CertificateRequestDenied"})
		if err != nil || len(events.Items) == 0 {
			return false, err
		}
		message = events.Items[0].Message
		return true, nil
	}); err != nil {
		t.Fatalf("no CertificateRequestDenied Event: %v", err)
	}
	if !strings.Contains(message, `DNS SAN "web.payments.svc" matches none of the patterns allowed for namespace "apps"`) {
		t.Errorf("Event message = %q", message)
	}
	entries, _ := os.ReadDir(s.Dir)
	for _, e := range entries {
		if name := e.Name(); name == "tls.key" || name == "tls.crt" || name == "credential.pem" {
			t.Errorf("%s is in the app's volume after a denial", name)
		}
	}
	for _, f := range []string{"tls.key", "tls.crt"} {
		if data, err := s.Read(f); err == nil {
			t.Errorf("%s readable after a denial (%d bytes)", f, len(data))
		}
	}
}

// BenchmarkCertificateStartup times a sidecar from process start to its certificate on
// disk, against the local API server and the real signer; it reports the median.
func BenchmarkCertificateStartup(b *testing.B) {
	cp := planes.Get(b, true)
	sidecarRBAC(b, cp)
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		pod := podAs(b, cp, "startup-"+strconv.FormatInt(time.Now().UnixNano(), 36), "web")
		start := time.Now()
		s := certSidecar(b, cp, pod)
		s.WaitForContent(b, "tls.crt")
		took = append(took, time.Since(start))
		s.Process.Stop(5 * time.Second)
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "median-ms")
}
