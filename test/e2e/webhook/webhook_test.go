package webhook

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

func mirrorStore(t *testing.T, cfg *rest.Config) *bundleapi.Store {
	t.Helper()
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return bundleapi.NewStore(c, bundle.Mirror)
}

func dryRunCreate(ctx context.Context, s *bundleapi.Store, b *certificatesv1.ClusterTrustBundle) (*certificatesv1.ClusterTrustBundle, error) {
	return s.Create(ctx, b, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
}

func ctb(name, signer, trustBundle string) *certificatesv1.ClusterTrustBundle {
	return &certificatesv1.ClusterTrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: trustBundle},
	}
}

func editor(cp *controlplane.ControlPlane) *rest.Config {
	return cp.UserConfig("editor", "e2e-bundle-editors")
}

func attester(cp *controlplane.ControlPlane) *rest.Config {
	return cp.UserConfig("attester", "e2e-bundle-editors")
}

const attestDenied = `user not permitted to attest for signerName "example.com/server-tls"`

func wantErrContaining(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v\nwant it to contain %q", err, want)
	}
}

// Both modes: publishing mirror anchors for a signer needs attest on it (or on its
// domain), exactly as for native bundles; a bundle without a signer needs none.
func TestMirror_AttestIsRequiredToPublishForASigner(t *testing.T) {
	for _, native := range []bool{false, true} {
		t.Run(mode(native), func(t *testing.T) {
			cp, _ := env(t, native)
			ctx := controlplane.Context(t)
			signed := ctb("example.com:server-tls:live", "example.com/server-tls", fixtures.Bundle(fixtures.CA("server-tls")))

			_, err := mirrorStore(t, editor(cp)).Create(ctx, signed, metav1.CreateOptions{})
			wantErrContaining(t, err, attestDenied)

			if _, err := mirrorStore(t, attester(cp)).Create(ctx, signed, metav1.CreateOptions{}); err != nil {
				t.Fatalf("a user with attest on example.com/* was refused: %v", err)
			}
			if _, err := mirrorStore(t, editor(cp)).Create(ctx, ctb("corp-root-"+mode(native), "", fixtures.Bundle(fixtures.CA("corp"))), metav1.CreateOptions{}); err != nil {
				t.Fatalf("a bundle without a signer needed attest: %v", err)
			}
		})
	}
}

// The mirror refuses what the API server refuses for native bundles, with its words.
func TestMirror_UpstreamRulesWithUpstreamMessages(t *testing.T) {
	cp, _ := env(t, false)
	ctx := controlplane.Context(t)
	s := mirrorStore(t, attester(cp))
	ca := fixtures.CA("dup")
	tests := []struct {
		name, bundle, want string
	}{
		{"empty", "", "spec.trustBundle: Invalid value: \"<value omitted>\": at least one trust anchor must be provided"},
		{"malformed", fixtures.Block("CERTIFICATE", []byte("not DER"), nil), "entry 0 does not parse as X.509"},
		{"a private key", string(ca.KeyPEM()), "entry 0 has bad block type: PRIVATE KEY"},
		{"non-CA", fixtures.Bundle(fixtures.MustNew(fixtures.Options{Leaf: true, Parent: ca})), "entry 0 does not have the CA bit set"},
		{"duplicate anchors", fixtures.Bundle(ca, ca), "duplicate trust anchor (indices [0 1])"},
		{"over 1 MiB", fixtures.Bundle(ca) + strings.Repeat("#", bundle.MaxTrustBundleSize), "spec.trustBundle: Too long: may not be more than 1048576 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Create(ctx, ctb("example.com:server-tls:bad", "example.com/server-tls", tc.bundle), metav1.CreateOptions{})
			wantErrContaining(t, err, tc.want)
			wantErrContaining(t, err, `ClusterTrustBundle.trustsync.io "example.com--server-tls--bad" is invalid`)
		})
	}
	t.Run("an empty name suffix is refused", func(t *testing.T) {
		_, err := s.Create(ctx, ctb("example.com:server-tls:", "example.com/server-tls", fixtures.Bundle(ca)), metav1.CreateOptions{})
		wantErrContaining(t, err, "a lowercase RFC 1123 subdomain")
	})
	t.Run("signerName cannot change", func(t *testing.T) {
		created, err := s.Create(ctx, ctb("example.com:server-tls:immutable", "example.com/server-tls", fixtures.Bundle(ca)), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Spec.SignerName = "example.com/other"
		_, err = s.Update(ctx, created, metav1.UpdateOptions{})
		wantErrContaining(t, err, "field is immutable")
	})
}

// With the webhook process gone, the API server itself still enforces attest through
// the ValidatingAdmissionPolicy, and the mirror's fail-closed webhook refuses everyone
// else's writes rather than let unchecked anchors in.
func TestMirror_WebhookDown(t *testing.T) {
	cp, w := env(t, false)
	ctx := controlplane.Context(t)
	w.Stop()
	t.Cleanup(func() {
		if err := w.Start(); err != nil {
			t.Fatalf("restarting the webhook: %v", err)
		}
	})
	signed := ctb("example.com:server-tls:outage", "example.com/server-tls", fixtures.Bundle(fixtures.CA("outage")))

	_, err := mirrorStore(t, editor(cp)).Create(ctx, signed, metav1.CreateOptions{})
	wantErrContaining(t, err, "ValidatingAdmissionPolicy")
	wantErrContaining(t, err, attestDenied)

	_, err = mirrorStore(t, attester(cp)).Create(ctx, signed, metav1.CreateOptions{})
	wantErrContaining(t, err, `failed calling webhook "mirror-bundles.trustsync.io"`)
}

// warnings collects the API server's warning headers for one client.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.seen, "\n")
}

func withWarnings(cfg *rest.Config) (*rest.Config, *warnings) {
	w := &warnings{}
	cfg.WarningHandler = w
	return cfg, w
}

func TestNative_ExpiringAnchorIsAdmittedWithAWarning(t *testing.T) {
	cp, _ := env(t, true)
	ctx := controlplane.Context(t)
	cfg, seen := withWarnings(cp.AdminConfig())
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	soon := fixtures.MustNew(fixtures.Options{CommonName: "expiring corp root", NotAfter: time.Now().Add(10*24*time.Hour + time.Hour)})
	if _, err := bundleapi.NewStore(c, bundle.NativeV1).Create(ctx, ctb("expiring-corp-root", "", fixtures.Bundle(fixtures.CA("fine"), soon)), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the bundle was refused: %v", err)
	}
	if got := seen.all(); !strings.Contains(got, "(CN=expiring corp root) expires on") || !strings.Contains(got, "in 10 days") {
		t.Fatalf("warnings = %q, want one naming the expiring anchor", got)
	}
}

func csr(name, signer string, seconds *int32, annotations map[string]string) *certificatesv1.CertificateSigningRequest {
	request, _ := fixtures.CSR("e2e", nil, nil)
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			SignerName: signer, Request: request, ExpirationSeconds: seconds,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
}

func TestCSR_DurationRules(t *testing.T) {
	cp, w := env(t, true)
	ctx := controlplane.Context(t)
	cfg, seen := withWarnings(cp.AdminConfig())
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	csrs := client.CertificatesV1().CertificateSigningRequests()

	t.Run("above the maximum is rejected under Reject", func(t *testing.T) {
		_, err := csrs.Create(ctx, csr("rejected-long", "example.com/rejected", ptr.To[int32](7200), nil), metav1.CreateOptions{})
		wantErrContaining(t, err, `denied the request: CertificateSigningRequest.certificates.k8s.io "rejected-long" is invalid: spec.expirationSeconds: Invalid value: 7200: requested duration 2h0m0s exceeds the maximum 1h0m0s`)
	})
	t.Run("above the maximum is stored clamped under Clamp, with a warning", func(t *testing.T) {
		got, err := csrs.Create(ctx, csr("clamped-long", "example.com/clamped", ptr.To[int32](86400), map[string]string{"experimental.cert-manager.io/request-duration": "24h"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s := got.Spec.ExpirationSeconds; s == nil || *s != 3600 {
			t.Fatalf("stored expirationSeconds = %v, want 3600", s)
		}
		if _, ok := got.Annotations["experimental.cert-manager.io/request-duration"]; ok {
			t.Error("the duration annotation asking for more survived the clamp")
		}
		if !strings.Contains(seen.all(), "spec.expirationSeconds set to 3600 (1h0m0s)") {
			t.Errorf("warnings = %q", seen.all())
		}
	})
	t.Run("no duration is stored with the default", func(t *testing.T) {
		got, err := csrs.Create(ctx, csr("clamped-default", "example.com/clamped", nil, nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s := got.Spec.ExpirationSeconds; s == nil || *s != 1800 {
			t.Fatalf("stored expirationSeconds = %v, want the default 1800", s)
		}
	})
	t.Run("a request within bounds is stored as sent", func(t *testing.T) {
		got, err := csrs.Create(ctx, csr("clamped-fine", "example.com/clamped", ptr.To[int32](900), nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s := got.Spec.ExpirationSeconds; s == nil || *s != 900 {
			t.Fatalf("stored expirationSeconds = %v, want 900 as sent", s)
		}
	})
	t.Run("under 600 seconds is rejected with upstream's message", func(t *testing.T) {
		_, err := csrs.Create(ctx, csr("clamped-short", "example.com/clamped", nil, map[string]string{"experimental.cert-manager.io/request-duration": "5m"}), metav1.CreateOptions{})
		wantErrContaining(t, err, "may not specify a duration less than 600 seconds (10 minutes)")
	})
	t.Run("other signers' CSRs are never sent to the webhook", func(t *testing.T) {
		routes := []string{"/validate/certificatesigningrequests", "/mutate/certificatesigningrequests"}
		before := 0.0
		for _, r := range routes {
			before += w.metric(t, "trustsync_webhook_admission_requests_total", map[string]string{"route": r})
		}
		got, err := csrs.Create(ctx, csr("kubelet-like", "kubernetes.io/kube-apiserver-client", ptr.To[int32](365*24*3600), nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s := got.Spec.ExpirationSeconds; s == nil || *s != 365*24*3600 {
			t.Errorf("another signer's CSR was changed: expirationSeconds = %v", s)
		}
		after := 0.0
		for _, r := range routes {
			after += w.metric(t, "trustsync_webhook_admission_requests_total", map[string]string{"route": r})
		}
		if after != before {
			t.Errorf("the webhook saw %v CSR reviews for a signer outside its policy", after-before)
		}
	})
}

// Rotating the serving certificate while reviews flow fails none of them, and new
// connections get the new certificate.
func TestServingCertificateRotation(t *testing.T) {
	cp, w := env(t, false)
	ctx := controlplane.Context(t)
	s := mirrorStore(t, attester(cp))
	ca := fixtures.CA("rotation")
	servedSerial := func() string {
		resp, err := w.Client().Get(w.URL("/healthz"))
		if err != nil {
			t.Fatalf("healthz during rotation: %v", err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber.String()
	}

	var failures []error
	serials := map[string]bool{}
	for i := range 60 {
		if i%10 == 0 {
			if err := w.RotateServingCert(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := dryRunCreate(ctx, s, ctb("example.com:server-tls:rotation", "example.com/server-tls", fixtures.Bundle(ca))); err != nil {
			failures = append(failures, err)
		}
		serials[servedSerial()] = true
		time.Sleep(50 * time.Millisecond)
	}
	if len(failures) > 0 {
		t.Fatalf("%d of 60 reviews failed during rotation; first: %v", len(failures), failures[0])
	}
	if len(serials) < 3 {
		t.Errorf("new connections saw %d serving certificates over 6 rotations, want several", len(serials))
	}
}

func mode(native bool) string {
	if native {
		return "native"
	}
	return "no-native"
}

// Garbage collection must never need attest: an update that changes only finalizers or
// ownerReferences passes both the webhook and the ValidatingAdmissionPolicy for a user
// without it, while any other change (labels, say) does not.
func TestMirror_GarbageCollectionFieldsNeedNoAttest(t *testing.T) {
	cp, _ := env(t, false)
	ctx := controlplane.Context(t)
	created, err := mirrorStore(t, attester(cp)).Create(ctx, ctb("example.com:server-tls:gc", "example.com/server-tls", fixtures.Bundle(fixtures.CA("gc"))), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := mirrorStore(t, editor(cp))

	withFinalizer := created.DeepCopy()
	withFinalizer.Finalizers = []string{"example.com/hold"}
	updated, err := s.Update(ctx, withFinalizer, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("adding a finalizer without attest was refused: %v", err)
	}

	relabelled := updated.DeepCopy()
	relabelled.Labels = map[string]string{"kubernetes.io/cluster-trust-bundle-version": "live"}
	_, err = s.Update(ctx, relabelled, metav1.UpdateOptions{})
	wantErrContaining(t, err, attestDenied)

	updated.Finalizers = nil
	if _, err := s.Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("removing the finalizer without attest was refused: %v", err)
	}
}
