// Package federation tests trust across clusters end to end with two real API
// servers: cluster B runs trustsync-signer serving its trust domain's SPIFFE bundle;
// cluster A runs trustsync-controller importing it through a FederatedTrustDomain.
// B serves only trustsync's mirror bundle API, A the native one, so the import is
// proven across both.
package federation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strconv"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

const (
	namespace = "trustsync-system"
	signerB   = "trustsync.io/workload"
	tdB       = "b.example"
	// hint is B's refresh hint: A fetches this often (its floor is 5 s), and B's new
	// CA waits three of them at least.
	hint = 5 * time.Second
	// window is B's timed propagation window: what its pods get; peers get 3 hints.
	window = 40 * time.Second
)

var planes = controlplane.Shared{Setup: setup}

func TestMain(m *testing.M) { planes.Main(m) }

func setup(cp *controlplane.ControlPlane, native bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if !native {
		if err := cp.InstallMirrorCRD(ctx); err != nil {
			return err
		}
	}
	if err := cp.InstallFederationCRD(ctx); err != nil {
		return err
	}
	if err := cp.InstallCRD(ctx, "testdata/clusterprofiles.yaml"); err != nil {
		return err
	}
	return cp.CreateNamespace(ctx, namespace, nil)
}

// clusters are A (native bundle API, the importer) and B (mirror only, the signer).
type clusters struct {
	a, b       *controlplane.ControlPlane
	endpoint   string // B's bundle endpoint, host:port
	signer     *controlplane.Process
	controller *controlplane.Process
	signerArgs []string
}

// standby runs a second replica of B's signer, which does not lead, and returns its
// bundle endpoint's address.
func (c *clusters) standby(t *testing.T) string {
	t.Helper()
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p, err := c.b.StartSigner(append(c.signerArgs, "--bundle-endpoint-bind-address="+addr)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	return addr
}

// start runs B's signer with its bundle endpoint and A's controller (with extra flags).
func start(t *testing.T, controllerArgs ...string) *clusters {
	t.Helper()
	c := &clusters{a: planes.Get(t, true), b: planes.Get(t, false)}
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c.endpoint = "127.0.0.1:" + strconv.Itoa(port)
	signerArgs := []string{"--namespace=" + namespace, "--signer-name=" + signerB, "--trust-domain=" + tdB,
		"--bundle-endpoint-refresh-hint=" + hint.String(), "--ca-propagation=timed", "--ca-propagation-window=" + window.String()}
	if c.signer, err = c.b.StartSigner(append(signerArgs, "--bundle-endpoint-bind-address="+c.endpoint)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.signer.Stop(5 * time.Second) })
	c.signerArgs = signerArgs
	if c.controller, err = c.a.StartController(append([]string{"--namespace=" + namespace}, controllerArgs...)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.controller.Stop(5 * time.Second) })
	return c
}

func dyn(t testing.TB, cp *controlplane.ControlPlane) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func kube(t testing.TB, cp *controlplane.ControlPlane) kubernetes.Interface {
	t.Helper()
	k, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// liveB waits for B's live bundle and returns it.
func (c *clusters) liveB(t *testing.T) *certificatesv1.ClusterTrustBundle {
	t.Helper()
	store := bundleapi.NewStore(dyn(t, c.b), bundle.Mirror)
	var live *certificatesv1.ClusterTrustBundle
	poll.Eventually(t, time.Minute, "B's live bundle", func() (bool, string) {
		b, err := store.Get(context.Background(), bundle.NamePrefix(signerB, bundle.NativeForm)+"live")
		if err != nil {
			return false, err.Error()
		}
		live = b
		return true, ""
	})
	return live
}

// imported reads A's imported bundle for B's trust domain (nil while absent).
func (c *clusters) imported(t *testing.T) *certificatesv1.ClusterTrustBundle {
	t.Helper()
	b, err := bundleapi.NewStore(dyn(t, c.a), bundle.NativeV1).Get(context.Background(), v1alpha1.FederatedBundleName(tdB))
	if err != nil {
		return nil
	}
	return b
}

// peer is the FederatedTrustDomain in A for B, authenticated https_spiffe.
func (c *clusters) peer(name, url, bootstrap string) *unstructured.Unstructured {
	ftd := &v1alpha1.FederatedTrustDomain{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.FederatedTrustDomainResource.GroupVersion().String(), Kind: v1alpha1.FederatedTrustDomainKind},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.FederatedTrustDomainSpec{TrustDomain: tdB, BundleEndpointURL: url,
			BundleEndpointProfile: v1alpha1.BundleEndpointProfile{Type: v1alpha1.ProfileSPIFFE, EndpointSPIFFEID: v1alpha1.BundleEndpointID(tdB)},
			TrustDomainBundle:     bootstrap},
	}
	m, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(ftd)
	return &unstructured.Unstructured{Object: m}
}

func (c *clusters) create(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	if _, err := dyn(t, c.a).Resource(v1alpha1.FederatedTrustDomainResource).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn(t, c.a).Resource(v1alpha1.FederatedTrustDomainResource).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{})
		// No garbage collector runs in this control plane: remove what it would.
		_ = bundleapi.NewStore(dyn(t, c.a), bundle.NativeV1).Delete(context.Background(), v1alpha1.FederatedBundleName(tdB), metav1.DeleteOptions{})
	})
}

// waitImported waits until the FederatedTrustDomain name is Ready, having refreshed
// from its endpoint, and A holds the imported bundle.
func (c *clusters) waitImported(t *testing.T, name string) {
	t.Helper()
	poll.Eventually(t, time.Minute, "A imports B's bundle through "+name, func() (bool, string) {
		s := c.status(t, name)
		st, reason, msg := ready(s)
		return st == metav1.ConditionTrue && c.imported(t) != nil && s.Sequence != nil && s.LastRefreshed != nil, string(st) + " " + reason + ": " + msg
	})
}

// status reads a FederatedTrustDomain's status.
func (c *clusters) status(t *testing.T, name string) v1alpha1.FederatedTrustDomainStatus {
	t.Helper()
	u, err := dyn(t, c.a).Resource(v1alpha1.FederatedTrustDomainResource).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := v1alpha1.FederatedTrustDomainFromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	return f.Status
}

func ready(s v1alpha1.FederatedTrustDomainStatus) (status metav1.ConditionStatus, reason, message string) {
	for _, c := range s.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			return c.Status, c.Reason, c.Message
		}
	}
	return "", "", ""
}

// events lists the Events recorded on the FederatedTrustDomain name in A.
func (c *clusters) events(t *testing.T, name string) []corev1.Event {
	t.Helper()
	list, err := kube(t, c.a).CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// endpointCertificate is the certificate B's endpoint presents: one B's signer issued.
func endpointCertificate(t *testing.T, addr string) *x509.Certificate {
	t.Helper()
	cert, err := fixtures.PeerCertificate(addr)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func anchorIDs(t *testing.T, trustBundle string) []string {
	t.Helper()
	certs, err := bundle.ParseCertificates([]byte(trustBundle))
	if err != nil {
		t.Fatal(err)
	}
	return v1alpha1.AnchorIDsOf(certs)
}

// caOf reads B's CA Secret's signing CA and key, as an attacker who stole them (or
// a misbehaving endpoint of B's own) would hold them.
func (c *clusters) caOf(t *testing.T) (*x509.Certificate, any) {
	t.Helper()
	s, err := kube(t, c.b).CoreV1().Secrets(namespace).Get(context.Background(), "trustsync-ca-trustsync.io-workload", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return cert, pair.PrivateKey
}

// deleteImported removes A's imported bundle for B, as the garbage collector would
// once its FederatedTrustDomain is gone (none runs in these control planes).
func deleteImported(t *testing.T, c *clusters) error {
	return bundleapi.NewStore(dyn(t, c.a), bundle.NativeV1).Delete(context.Background(), v1alpha1.FederatedBundleName(tdB), metav1.DeleteOptions{})
}
