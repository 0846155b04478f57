package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	bundlepkg "github.com/trustsync/trustsync/bundle"

	"github.com/trustsync/trustsync/test/fixtures"
)

// WebhookServer is an admission webhook on 127.0.0.1 that allows everything and
// counts the reviews it answered; its serving certificate can be changed while it
// runs, as a webhook's is when its CA rotates.
type WebhookServer struct {
	// URL is where it serves reviews.
	URL     string
	calls   atomic.Int64
	current atomic.Pointer[tls.Certificate]
}

// StartWebhookServer serves with a certificate for 127.0.0.1 from ca until the test
// ends.
func StartWebhookServer(t testing.TB, ca *fixtures.Cert) *WebhookServer {
	t.Helper()
	s := &WebhookServer{}
	s.ServeFrom(t, ca)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.current.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	s.URL = "https://" + ln.Addr().String() + "/validate"
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		s.calls.Add(1)
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	})}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); wg.Wait() })
	return s
}

// ServeFrom switches the serving certificate to one from ca.
func (s *WebhookServer) ServeFrom(t testing.TB, ca *fixtures.Cert) {
	t.Helper()
	leaf := fixtures.MustNew(fixtures.Options{CommonName: "webhook", Leaf: true, Parent: ca, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	c, err := tls.X509KeyPair(leaf.CertPEM(), leaf.KeyPEM())
	if err != nil {
		t.Fatal(err)
	}
	s.current.Store(&c)
}

// Calls is how many reviews it has answered.
func (s *WebhookServer) Calls() int64 { return s.calls.Load() }

// WebhookCABundleRotation proves that a ValidatingWebhookConfiguration annotated with
// bundle gets it as its caBundle and that the API server keeps calling the webhook
// (a WebhookServer on 127.0.0.1) through a CA rotation: the bundle holds oldCA; then
// old and new, and the server switches to a certificate of newCA; then newCA alone.
// The webhook reviews ConfigMaps created in namespace (which must exist); set sets
// the bundle's anchors. Everything it creates goes when the test ends.
func WebhookCABundleRotation(t *testing.T, client kubernetes.Interface, bundle, namespace string, oldCA, newCA *fixtures.Cert, set func(anchors ...*fixtures.Cert)) {
	t.Helper()
	ctx := context.Background()
	srv := StartWebhookServer(t, oldCA)
	ns, err := client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := srv.URL
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "inject-" + namespace, Annotations: map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": bundle}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "configmaps.inject.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns.Name}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), vwc.Name, metav1.DeleteOptions{})
	})
	caBundleHolds := func(anchors ...*fixtures.Cert) func() bool {
		return func() bool {
			got, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, vwc.Name, metav1.GetOptions{})
			if err != nil || len(got.Webhooks) == 0 {
				return false
			}
			certs, err := bundlepkg.ParseCertificates(got.Webhooks[0].ClientConfig.CABundle)
			if err != nil || len(certs) != len(anchors) {
				return false
			}
			for i := range anchors {
				if !slices.ContainsFunc(certs, anchors[i].Cert.Equal) {
					return false
				}
			}
			return true
		}
	}
	waitUntil := func(what string, ok func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) { return ok(), nil }); err != nil {
			t.Fatalf("never saw %s", what)
		}
	}
	// admitted creates a ConfigMap through the webhook: the API server must call it.
	admitted := func(when string) {
		t.Helper()
		before := srv.Calls()
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: when + "-"}}, metav1.CreateOptions{})
			return err == nil, nil
		})
		if err != nil || srv.Calls() == before {
			t.Fatalf("%s: the API server did not get an answer from the webhook (%d calls): %v", when, srv.Calls()-before, err)
		}
	}
	waitUntil("the webhook's caBundle holding the old CA", caBundleHolds(oldCA))
	admitted("before")
	set(oldCA, newCA)
	waitUntil("the caBundle holding the old and the new CA", caBundleHolds(oldCA, newCA))
	srv.ServeFrom(t, newCA)
	admitted("during")
	set(newCA)
	waitUntil("the caBundle holding the new CA alone", caBundleHolds(newCA))
	admitted("after")
}
