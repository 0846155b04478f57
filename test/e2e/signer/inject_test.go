package signer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
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

	"github.com/trustsync/trustsync/agent/holdings"
	"github.com/trustsync/trustsync/test/fixtures"
)

// An existing ConfigMap annotated to ask for a bundle gets it as the key its
// annotations name, kept current, and another tool's key beside it survives; a key
// another tool owns is not taken, and a Warning Event on the ConfigMap says so.
func TestInject_AnnotatedConfigMapGetsTheBundleAndKeepsOtherKeys(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("signer log:\n%s", signers[cp].Tail())
		}
	})
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	rootA, rootB := fixtures.CA("inject A"), fixtures.CA("inject B")
	nativeBundle(t, client, "inject-"+run, rootA)
	labelledNamespace(t, client, "inject-"+run, nil)
	ns := "inject-" + run
	annotations := map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "inject-" + run, "trustsync.io/path": "ca.crt"}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-trust", Annotations: annotations},
		Data: map[string]string{"app.conf": "the app's own"}}, metav1.CreateOptions{FieldManager: "helm"}); err != nil {
		t.Fatal(err)
	}
	holds := func(anchors ...*fixtures.Cert) bool {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "app-trust", metav1.GetOptions{})
		if err != nil || cm.Data["app.conf"] != "the app's own" {
			return false
		}
		got, err := holdings.Anchors([]byte(cm.Data["ca.crt"]))
		return err == nil && slices.Equal(got, ids(anchors...))
	}
	waitFor(t, "the annotated ConfigMap holding A beside the app's key", func() bool { return holds(rootA) })
	setNativeBundle(t, client, "inject-"+run, rootA, rootB)
	waitFor(t, "the annotated ConfigMap holding A and B", func() bool { return holds(rootA, rootB) })
	waitEventOn(t, client, ns, "app-trust", "TrustInjected", "Wrote keys ca.crt from bundle inject-"+run)

	// A key another tool owns.
	owned := map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "inject-" + run, "trustsync.io/path": "ca.crt"}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owned", Annotations: owned},
		Data: map[string]string{"ca.crt": "another tool's"}}, metav1.CreateOptions{FieldManager: "another-tool"}); err != nil {
		t.Fatal(err)
	}
	waitEventOn(t, client, ns, "owned", "TrustInjectFailed", "another manager owns a key the annotations name")
	if cm, _ := client.CoreV1().ConfigMaps(ns).Get(ctx, "owned", metav1.GetOptions{}); cm.Data["ca.crt"] != "another tool's" {
		t.Errorf("another tool's key was taken: %q", cm.Data["ca.crt"])
	}
}

// A ValidatingWebhookConfiguration annotated with a bundle gets it as every webhook's
// caBundle, and the API server keeps calling the webhook through a CA rotation: the
// bundle holds the old and the new CA, the server switches to a certificate of the
// new one, then the bundle drops the old.
func TestInject_WebhookCABundleFollowsTheBundleThroughARotation(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	oldCA, newCA := fixtures.CA("webhook CA old"), fixtures.CA("webhook CA new")
	serving := func(ca *fixtures.Cert) *tls.Certificate {
		leaf := fixtures.MustNew(fixtures.Options{CommonName: "webhook", Leaf: true, Parent: ca, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		c, err := tls.X509KeyPair(leaf.CertPEM(), leaf.KeyPEM())
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	var current atomic.Pointer[tls.Certificate]
	current.Store(serving(oldCA))
	var calls atomic.Int64
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return current.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		calls.Add(1)
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	})}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); wg.Wait() })

	bundle := "webhook-ca-" + run
	nativeBundle(t, client, bundle, oldCA)
	ns := "webhooked-" + run
	labelledNamespace(t, client, ns, map[string]string{"webhooked": run})
	url := "https://" + ln.Addr().String() + "/validate"
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "inject-" + run, Annotations: map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": bundle}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "configmaps.inject.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"webhooked": run}},
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
	caBundleHolds := func(anchors ...*fixtures.Cert) bool {
		got, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, vwc.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		have, err := holdings.Anchors(got.Webhooks[0].ClientConfig.CABundle)
		return err == nil && slices.Equal(have, ids(anchors...))
	}
	// admitted creates a ConfigMap through the webhook and reports whether the API
	// server called it and admitted the object.
	admitted := func(name string) error {
		before := calls.Load()
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}}, metav1.CreateOptions{})
			return err == nil, nil
		})
		if err != nil || calls.Load() == before {
			return fmt.Errorf("the API server did not get an answer from the webhook (%d calls): %v", calls.Load()-before, err)
		}
		return nil
	}

	waitFor(t, "the webhook's caBundle holding the old CA", func() bool { return caBundleHolds(oldCA) })
	if err := admitted("before"); err != nil {
		t.Fatal(err)
	}
	setNativeBundle(t, client, bundle, oldCA, newCA)
	waitFor(t, "the caBundle holding the old and the new CA", func() bool { return caBundleHolds(oldCA, newCA) })
	current.Store(serving(newCA))
	if err := admitted("during"); err != nil {
		t.Fatalf("with the server on the new CA: %v", err)
	}
	setNativeBundle(t, client, bundle, newCA)
	waitFor(t, "the caBundle holding the new CA alone", func() bool { return caBundleHolds(newCA) })
	if err := admitted("after"); err != nil {
		t.Fatalf("once the old CA is gone: %v", err)
	}
}

// waitEventOn waits for an Event of reason on namespace/name whose message contains want.
func waitEventOn(t *testing.T, client kubernetes.Interface, namespace, name, reason, want string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		events, err := client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range events.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == reason && strings.Contains(e.Message, want) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s Event on %s/%s saying %q; its Events: %q", reason, namespace, name, want, seen)
	}
}
