// Package signer tests trustsync-signer end to end: the real binary, with leader
// election, against a real kube-apiserver, signing CSRs that ServiceAccounts create;
// beside it runs trustsync-controller, whose objects a rotation waits for (the
// controller's own behaviour is test/e2e/controller's).
package signer

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/url"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

const (
	signerNamespace = "trustsync-system"
	appNamespace    = "apps"
	workload        = "trustsync.io/workload"
	// window is the CA propagation window these tests run the signer with.
	window = 5 * time.Second
)

var (
	planes      = controlplane.Shared{Setup: setup}
	signers     = map[*controlplane.ControlPlane]*controlplane.Process{}
	controllers = map[*controlplane.ControlPlane]*controlplane.Process{}
)

func TestMain(m *testing.M) { planes.Main(m) }

func setup(cp *controlplane.ControlPlane, native bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if !native {
		if err := cp.InstallMirrorCRD(ctx); err != nil {
			return err
		}
	}
	if err := cp.InstallReportsCRD(ctx); err != nil {
		return err
	}
	if err := cp.InstallTargetsCRD(ctx); err != nil {
		return err
	}
	for _, ns := range []string{signerNamespace, appNamespace} {
		if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
			return err
		}
	}
	if err := grantCSRRequesters(ctx, cp); err != nil {
		return err
	}
	p, err := startSigner(cp, "--signer-name="+workload)
	if err != nil {
		return err
	}
	signers[cp] = p
	c, err := cp.StartController("--namespace=" + signerNamespace)
	if err != nil {
		return err
	}
	controllers[cp] = c
	return nil
}

// grantCSRRequesters lets every ServiceAccount create CSRs and read one by name, as
// the chart's optional ClusterRole does, and no more: no list or watch.
func grantCSRRequesters(ctx context.Context, cp *controlplane.ControlPlane) error {
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "csr-requester"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"create", "get"},
	}}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "csr-requesters"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "csr-requester"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts"}},
	}, metav1.CreateOptions{})
	return err
}

// startSigner runs trustsync-signer with leader election and a short, timed
// propagation window (propagation_test.go runs one with observed propagation).
func startSigner(cp *controlplane.ControlPlane, extra ...string) (*controlplane.Process, error) {
	return cp.StartSigner(append([]string{"--namespace=" + signerNamespace, "--ca-propagation=timed", "--ca-propagation-window=" + window.String()}, extra...)...)
}

func kube(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// liveStore is where the signer publishes: the native API when served, else the mirror.
func liveStore(t testing.TB, cp *controlplane.ControlPlane, native bool) *bundleapi.Store {
	t.Helper()
	c, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	if native {
		return bundleapi.NewStore(c, bundle.NativeV1)
	}
	return bundleapi.NewStore(c, bundle.Mirror)
}

// requestAs creates a CSR as ServiceAccount apps/<sa> for uris and dns names.
func requestAs(t testing.TB, cp *controlplane.ControlPlane, sa, signer string, seconds *int32, uris []string, dns ...string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	cfg, err := cp.ServiceAccountConfig(context.Background(), appNamespace, sa)
	if err != nil {
		t.Fatal(err)
	}
	var parsed []*url.URL
	for _, u := range uris {
		p, _ := url.Parse(u)
		parsed = append(parsed, p)
	}
	req, _ := fixtures.CSR("ignored", dns, parsed)
	csr, err := kube(t, cfg).CertificatesV1().CertificateSigningRequests().Create(context.Background(), &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: sa + "-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			SignerName: signer, Request: req, ExpirationSeconds: seconds,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

// waitDone waits until the CSR is issued, denied or failed, and returns it.
func waitDone(t testing.TB, cp *controlplane.ControlPlane, name string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var csr *certificatesv1.CertificateSigningRequest
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		csr, err = kube(t, cp.AdminConfig()).CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(csr.Status.Certificate) > 0 {
			return true, nil
		}
		for _, c := range csr.Status.Conditions {
			if c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CSR %s was never decided: %v (conditions %+v)", name, err, csr.Status.Conditions)
	}
	return csr
}

func leaf(t testing.TB, csr *certificatesv1.CertificateSigningRequest) *x509.Certificate {
	t.Helper()
	certs, err := bundle.ParseCertificates(csr.Status.Certificate)
	if err != nil || len(certs) == 0 {
		t.Fatalf("status.certificate: %v", err)
	}
	return certs[0]
}

// livePool returns the anchors of the signer's live bundle.
func livePool(t testing.TB, s *bundleapi.Store) *x509.CertPool {
	t.Helper()
	b, err := s.Get(context.Background(), "trustsync.io:workload:live")
	if err != nil {
		t.Fatalf("live bundle: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(b.Spec.TrustBundle)) {
		t.Fatal("the live bundle holds no certificate")
	}
	return pool
}

func mode(native bool) string {
	if native {
		return "native"
	}
	return "no-native"
}

func spiffe(ns, sa string) string { return fmt.Sprintf("spiffe://cluster.local/ns/%s/sa/%s", ns, sa) }
