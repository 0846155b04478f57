package webhook

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
)

func selfTLSFor(t *testing.T, client *fake.Clientset, clk *clocktesting.FakePassiveClock) *selfTLS {
	return &selfTLS{client: client, namespace: "trustsync-system", secretName: "trustsync-webhook-tls", service: "trustsync-webhook",
		configName: "trustsync", clock: clk}
}

func webhookConfigs() (*admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfiguration) {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "trustsync"}, Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "a.trustsync.io"}, {Name: "b.trustsync.io"}}},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "trustsync"}, Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "c.trustsync.io"}}}
}

func servingCert(t *testing.T, s *selfTLS) *x509.Certificate {
	t.Helper()
	pair, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatalf("no certificate is served: %v", err)
	}
	return pair.Leaf
}

func caBundles(t *testing.T, client *fake.Clientset) [][]byte {
	t.Helper()
	v, _ := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), "trustsync", metav1.GetOptions{})
	m, _ := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "trustsync", metav1.GetOptions{})
	var out [][]byte
	for _, w := range v.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	for _, w := range m.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out
}

func TestSelfTLS(t *testing.T) {
	ctx := context.Background()
	v, m := webhookConfigs()
	client := fake.NewClientset(v, m)
	clk := clocktesting.NewFakePassiveClock(testNow)

	// First start: a CA and a serving certificate for the Service, in a Secret, in
	// files, and trusted by every webhook of both configurations.
	first := selfTLSFor(t, client, clk)
	events := record.NewFakeRecorder(10)
	first.events = events
	if err := first.sync(ctx); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, events, "Normal WebhookCertificateGenerated Generated the webhook's CA and a serving certificate for Service trustsync-webhook.trustsync-system")
	secret, err := client.CoreV1().Secrets("trustsync-system").Get(ctx, "trustsync-webhook-tls", metav1.GetOptions{})
	if err != nil || secret.Type != corev1.SecretTypeTLS {
		t.Fatalf("Secret = %v, %v", secret, err)
	}
	cert := servingCert(t, first)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(secret.Data["ca.crt"])
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "trustsync-webhook.trustsync-system.svc", CurrentTime: testNow}); err != nil {
		t.Fatalf("the serving certificate does not verify for the Service: %v", err)
	}
	for i, b := range caBundles(t, client) {
		if !bytes.Equal(b, secret.Data["ca.crt"]) {
			t.Errorf("webhook %d does not trust the CA", i)
		}
	}

	// A second replica serves the same certificate: it reads, it does not regenerate.
	second := selfTLSFor(t, client, clk)
	second.events = events
	if err := second.sync(ctx); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, events, "")
	if !servingCert(t, second).Equal(cert) {
		t.Error("a second replica made its own certificate")
	}

	// At two thirds of its life the serving certificate is renewed by the same CA.
	clk.SetTime(testNow.Add(selfServingValidity * 2 / 3))
	if err := second.sync(ctx); err != nil {
		t.Fatal(err)
	}
	renewed := servingCert(t, second)
	if renewed.Equal(cert) {
		t.Fatal("the serving certificate was not renewed")
	}
	expectEvent(t, events, "Normal WebhookCertificateRenewed Renewed the webhook's serving certificate for Service trustsync-webhook.trustsync-system; the new one is valid until")
	if _, err := renewed.Verify(x509.VerifyOptions{Roots: roots, DNSName: "trustsync-webhook.trustsync-system.svc", CurrentTime: clk.Now()}); err != nil {
		t.Errorf("the renewed certificate is not from the same CA: %v", err)
	}
	if err := first.sync(ctx); err != nil || !servingCert(t, first).Equal(renewed) {
		t.Errorf("the other replica did not take the renewal: %v", err)
	}

	// A `helm upgrade` resets caBundle; the next sync puts it back.
	v, _ = client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "trustsync", metav1.GetOptions{})
	v.Webhooks[0].ClientConfig.CABundle = nil
	if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := first.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if b := caBundles(t, client)[0]; !bytes.Equal(b, secret.Data["ca.crt"]) {
		t.Error("the emptied caBundle was not restored")
	}
}

func TestSelfTLS_AForeignSecretWithoutItsCAIsReportedNotOverwritten(t *testing.T) {
	ctx := context.Background()
	// A serving certificate for another name forces a reissue, which needs the CA.
	expired := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: anchor.Cert.Raw})
	client := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "trustsync-webhook-tls", Namespace: "trustsync-system"},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": expired, "tls.key": anchor.KeyPEM()}})
	s := selfTLSFor(t, client, clocktesting.NewFakePassiveClock(testNow))
	if err := s.sync(ctx); err == nil {
		t.Fatal("a Secret without the CA was accepted")
	}
	got, _ := client.CoreV1().Secrets("trustsync-system").Get(ctx, "trustsync-webhook-tls", metav1.GetOptions{})
	if !bytes.Equal(got.Data["tls.crt"], expired) {
		t.Error("the Secret was overwritten")
	}
	if _, err := s.GetCertificate(nil); err == nil {
		t.Error("a certificate from an unusable Secret is served")
	}
}

func TestSelfTLS_AReplicaWithoutTheLeaseOnlyReads(t *testing.T) {
	ctx := context.Background()
	v, m := webhookConfigs()
	client := fake.NewClientset(v, m)
	clk := clocktesting.NewFakePassiveClock(testNow)
	var leaderHolds bool
	follower := selfTLSFor(t, client, clk)
	follower.leading = func() bool { return false }
	leader := selfTLSFor(t, client, clk)
	leader.leading = func() bool { return leaderHolds }

	// Before any leader: nothing is created, and the error says what it waits for.
	err := follower.sync(ctx)
	if err == nil || !strings.Contains(err.Error(), "waiting for the replica holding the Lease trustsync-system/trustsync-webhook-tls") {
		t.Fatalf("sync without a Secret = %v, want a wait for the leader", err)
	}
	if secrets, _ := client.CoreV1().Secrets("trustsync-system").List(ctx, metav1.ListOptions{}); len(secrets.Items) != 0 {
		t.Fatal("a replica without the Lease created the Secret")
	}

	leaderHolds = true
	if err := leader.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := follower.sync(ctx); err != nil || !servingCert(t, follower).Equal(servingCert(t, leader)) {
		t.Fatalf("the follower does not serve the leader's certificate: %v", err)
	}

	// Renewal due and caBundle emptied: the follower serves what the Secret holds and
	// writes nothing; the leader renews and restores.
	clk.SetTime(testNow.Add(selfServingValidity * 2 / 3))
	v, _ = client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "trustsync", metav1.GetOptions{})
	v.Webhooks[0].ClientConfig.CABundle = nil
	if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := servingCert(t, follower)
	if err := follower.sync(ctx); err != nil || !servingCert(t, follower).Equal(before) {
		t.Errorf("the follower renewed: %v", err)
	}
	if b := caBundles(t, client)[0]; b != nil {
		t.Error("the follower set caBundle")
	}
	if err := leader.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := follower.sync(ctx); err != nil || servingCert(t, follower).Equal(before) {
		t.Errorf("the follower did not take the leader's renewal: %v", err)
	}
	if b := caBundles(t, client)[0]; b == nil {
		t.Error("the leader did not restore caBundle")
	}
}

// expectEvent takes the next recorded Event and checks it starts with want; an empty
// want means none was recorded.
func expectEvent(t *testing.T, events *record.FakeRecorder, want string) {
	t.Helper()
	select {
	case got := <-events.Events:
		if want == "" || !strings.HasPrefix(got, want) {
			t.Errorf("Event %q, want one starting %q", got, want)
		}
	default:
		if want != "" {
			t.Errorf("no Event, want one starting %q", want)
		}
	}
}
