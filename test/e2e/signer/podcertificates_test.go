//lint:file-ignore SA1019 v1beta1 PodCertificateRequests of Kubernetes 1.35 carry the key in the deprecated fields, which these tests send.

package signer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/controlplane"
)

// TestPodCertificateRequest_DecidedAsTheAPIServerAccepts creates PodCertificateRequests
// as the kubelet would for a pod bound to a node, and checks that the signer ends each
// with a status the API server accepts: issued to the pod's ServiceAccount's SPIFFE ID,
// verifying against the published live bundle, within the request's maximum; or
// denied with upstream's reason. (On a real node the kubelet creates them itself:
// test/e2e/node.)
func TestPodCertificateRequest_DecidedAsTheAPIServerAccepts(t *testing.T) {
	cp := planes.Get(t, true)
	client := kube(t, cp.AdminConfig())
	if !servesPodCertificateRequests(t, client) {
		t.Skip("this API server does not serve certificates.k8s.io/v1 PodCertificateRequests")
	}
	node, sa, pod := boundPod(t, client, "pcr")
	request := func(name string, annotations map[string]string) *certificatesv1.PodCertificateRequest {
		t.Helper()
		pcr := createPCR(t, client, node, sa, pod, name, annotations)
		return waitDecided(t, client.CertificatesV1().PodCertificateRequests(appNamespace), pcr.Name)
	}

	t.Run("issued to the pod's ServiceAccount, verifying against the live bundle, within maxExpirationSeconds", func(t *testing.T) {
		pcr := request("pcr-web-issued", map[string]string{"trustsync.io/dns-names": "pcr-web.apps.svc"})
		if c := pcr.Status.Conditions[0]; c.Type != "Issued" {
			t.Fatalf("condition %s/%s: %s", c.Type, c.Reason, c.Message)
		}
		certs, err := bundle.ParseCertificates([]byte(pcr.Status.CertificateChain))
		if err != nil {
			t.Fatal(err)
		}
		leaf := certs[0]
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != spiffe(appNamespace, sa.Name) || strings.Join(leaf.DNSNames, ",") != "pcr-web.apps.svc" {
			t.Errorf("URIs %v, DNS names %v; want %s and pcr-web.apps.svc", leaf.URIs, leaf.DNSNames, spiffe(appNamespace, sa.Name))
		}
		if got := leaf.NotAfter.Sub(leaf.NotBefore); got != 2*time.Hour {
			t.Errorf("lifetime %s, want spec.maxExpirationSeconds' 2h (below the policy's 24h default)", got)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: livePool(t, liveStore(t, cp, true)), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("the certificate does not verify against the published live bundle: %v", err)
		}
	})
	t.Run("a DNS name outside the policy is denied with upstream's reason", func(t *testing.T) {
		pcr := request("pcr-web-denied", map[string]string{"trustsync.io/dns-names": "pcr-web.other.svc"})
		c := pcr.Status.Conditions[0]
		if c.Type != "Denied" || c.Reason != certificatesv1.PodCertificateRequestConditionInvalidUserConfig || !strings.Contains(c.Message, `"pcr-web.other.svc" matches none of the patterns`) {
			t.Errorf("condition %s/%s %q; want Denied/%s naming the name", c.Type, c.Reason, c.Message, certificatesv1.PodCertificateRequestConditionInvalidUserConfig)
		}
		if pcr.Status.CertificateChain != "" {
			t.Error("a denied request carries a certificate")
		}
	})
}

// createPCR creates a PodCertificateRequest for the signer workload as the kubelet of
// node would for pod, with a fresh key.
func createPCR(t *testing.T, client kubernetes.Interface, node *corev1.Node, sa *corev1.ServiceAccount, pod *corev1.Pod, name string, annotations map[string]string) *certificatesv1.PodCertificateRequest {
	t.Helper()
	return createPCRFor(t, client, workload, node, sa, pod, name, annotations)
}

// createPCRFor is createPCR for another signer.
func createPCRFor(t *testing.T, client kubernetes.Interface, signerName string, node *corev1.Node, sa *corev1.ServiceAccount, pod *corev1.Pod, name string, annotations map[string]string) *certificatesv1.PodCertificateRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	stub, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		t.Fatal(err)
	}
	pcr, err := client.CertificatesV1().PodCertificateRequests(pod.Namespace).Create(context.Background(), &certificatesv1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.PodCertificateRequestSpec{
			SignerName: signerName, PodName: pod.Name, PodUID: pod.UID, ServiceAccountName: sa.Name, ServiceAccountUID: sa.UID,
			NodeName: types.NodeName(node.Name), NodeUID: node.UID, MaxExpirationSeconds: ptr.To[int32](7200), StubPKCS10Request: stub,
			UnverifiedUserAnnotations: annotations,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pcr
}

// servesPodCertificateRequests says whether the API server serves certificates.k8s.io/v1
// PodCertificateRequests.
func servesPodCertificateRequests(t *testing.T, client kubernetes.Interface) bool {
	t.Helper()
	served, err := client.Discovery().ServerResourcesForGroupVersion("certificates.k8s.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(resourceNames(served.APIResources), "podcertificaterequests")
}

// boundPod creates a node <prefix>-node, a ServiceAccount <prefix>-web and a pod
// <prefix>-web running as it, bound to the node: what a kubelet's request names.
func boundPod(t *testing.T, client kubernetes.Interface, prefix string) (*corev1.Node, *corev1.ServiceAccount, *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	node, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-node"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := client.CoreV1().ServiceAccounts(appNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-web"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods(appNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: prefix + "-web"},
		Spec:       corev1.PodSpec{NodeName: node.Name, ServiceAccountName: sa.Name, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return node, sa, pod
}

func resourceNames(rs []metav1.APIResource) string {
	var names []string
	for _, r := range rs {
		names = append(names, r.Name)
	}
	return strings.Join(names, ",")
}

type pcrGetter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*certificatesv1.PodCertificateRequest, error)
}

// waitDecided waits until the request carries a terminal condition.
func waitDecided(t *testing.T, pcrs pcrGetter, name string) *certificatesv1.PodCertificateRequest {
	t.Helper()
	var pcr *certificatesv1.PodCertificateRequest
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		pcr, err = pcrs.Get(ctx, name, metav1.GetOptions{})
		return err == nil && len(pcr.Status.Conditions) > 0, err
	})
	if err != nil {
		t.Fatalf("PodCertificateRequest %s was never decided: %v", name, err)
	}
	return pcr
}

// TestPodCertificateRequest_V1beta1WhereOnlyItIsServed runs the signer against an API
// server serving PodCertificateRequests in v1beta1 alone, as Kubernetes 1.35 and 1.36
// do with the beta API on: a request whose key comes as a PKIX public key with a proof
// of possession over the pod's UID is issued to that key.
func TestPodCertificateRequest_V1beta1WhereOnlyItIsServed(t *testing.T) {
	cp, err := controlplane.Start(controlplane.Options{ExtraAPIServerFlags: []string{
		"--runtime-config=certificates.k8s.io/v1beta1=true,certificates.k8s.io/v1/podcertificaterequests=false",
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	if err := setup(cp, true); err != nil {
		t.Fatal(err)
	}
	defer signers[cp].Stop(10 * time.Second)
	defer controllers[cp].Stop(10 * time.Second)
	client := kube(t, cp.AdminConfig())
	ctx := context.Background()
	v1, err := client.Discovery().ServerResourcesForGroupVersion("certificates.k8s.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	beta, err := client.Discovery().ServerResourcesForGroupVersion("certificates.k8s.io/v1beta1")
	if err != nil || strings.Contains(resourceNames(v1.APIResources), "podcertificaterequests") || !strings.Contains(resourceNames(beta.APIResources), "podcertificaterequests") {
		t.Fatalf("the API server does not serve PodCertificateRequests in v1beta1 alone (v1: %s; v1beta1: %v)", resourceNames(v1.APIResources), err)
	}

	node, sa, pod := boundPod(t, client, "beta")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	digest := sha256.Sum256([]byte(pod.UID))
	proof, err := ecdsa.SignASN1(rand.Reader, key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	pcrs := client.CertificatesV1beta1().PodCertificateRequests(appNamespace)
	created, err := pcrs.Create(ctx, &certificatesv1beta1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "beta-web-1"},
		Spec: certificatesv1beta1.PodCertificateRequestSpec{
			SignerName: workload, PodName: pod.Name, PodUID: pod.UID, ServiceAccountName: sa.Name, ServiceAccountUID: sa.UID,
			NodeName: types.NodeName(node.Name), NodeUID: node.UID, MaxExpirationSeconds: ptr.To[int32](3600), PKIXPublicKey: der, ProofOfPossession: proof,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got *certificatesv1beta1.PodCertificateRequest
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err = pcrs.Get(ctx, created.Name, metav1.GetOptions{})
		return err == nil && len(got.Status.Conditions) > 0, err
	}); err != nil {
		t.Fatalf("the v1beta1 request was never decided: %v", err)
	}
	if c := got.Status.Conditions[0]; c.Type != "Issued" {
		t.Fatalf("condition %s/%s: %s", c.Type, c.Reason, c.Message)
	}
	certs, err := bundle.ParseCertificates([]byte(got.Status.CertificateChain))
	if err != nil {
		t.Fatal(err)
	}
	if !key.PublicKey.Equal(certs[0].PublicKey) || certs[0].URIs[0].String() != spiffe(appNamespace, sa.Name) {
		t.Errorf("issued to %v for %v; want the proven key and %s", certs[0].PublicKey, certs[0].URIs, spiffe(appNamespace, sa.Name))
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: livePool(t, liveStore(t, cp, true)), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the certificate does not verify against the live bundle: %v", err)
	}
}
