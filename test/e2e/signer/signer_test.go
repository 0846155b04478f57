package signer

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/test/fixtures"
)

func condition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequestCondition {
	for i := range csr.Status.Conditions {
		if csr.Status.Conditions[i].Type == t {
			return &csr.Status.Conditions[i]
		}
	}
	return nil
}

func TestSigner_IssuesAServiceAccountItsOwnIdentity(t *testing.T) {
	for _, native := range []bool{true, false} {
		t.Run(mode(native), func(t *testing.T) {
			cp := planes.Get(t, native)
			csr := waitDone(t, cp, requestAs(t, cp, "web", workload, ptr.To[int32](900), []string{spiffe(appNamespace, "web")}, "web.apps.svc").Name)
			if c := condition(csr, certificatesv1.CertificateApproved); c == nil || c.Reason != "TrustsyncPolicyApproved" {
				t.Fatalf("conditions = %+v, want approved by trustsync", csr.Status.Conditions)
			}
			cert := leaf(t, csr)
			if got := cert.NotAfter.Sub(cert.NotBefore); got != 900*time.Second+5*time.Minute {
				t.Errorf("NotAfter - NotBefore = %s, want 900s plus the 5-minute backdate", got)
			}
			if cert.URIs[0].String() != spiffe(appNamespace, "web") || cert.Subject.String() != "" {
				t.Errorf("identity = %v, subject %q", cert.URIs, cert.Subject)
			}
			pool := livePool(t, liveStore(t, cp, native))
			if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("the certificate does not verify against the published bundle: %v", err)
			}
		})
	}
}

func TestSigner_DeniesAnotherNamespacesIdentity(t *testing.T) {
	cp := planes.Get(t, true)
	csr := waitDone(t, cp, requestAs(t, cp, "web", workload, nil, []string{spiffe("payments", "web")}).Name)
	c := condition(csr, certificatesv1.CertificateDenied)
	if c == nil || c.Reason != "TrustsyncPolicyDenied" || !strings.Contains(c.Message, `URI SAN "spiffe://cluster.local/ns/payments/sa/web" is not the requester's own SPIFFE ID "spiffe://cluster.local/ns/apps/sa/web"`) {
		t.Fatalf("conditions = %+v", csr.Status.Conditions)
	}
	if len(csr.Status.Certificate) > 0 {
		t.Error("a denied CSR was signed")
	}
}

// Without the webhook in front, the signer still applies its maximum itself.
func TestSigner_ClampsAYearToItsMaximum(t *testing.T) {
	cp := planes.Get(t, true)
	csr := waitDone(t, cp, requestAs(t, cp, "web", workload, ptr.To[int32](365*24*3600), []string{spiffe(appNamespace, "web")}).Name)
	cert := leaf(t, csr)
	if got := cert.NotAfter.Sub(cert.NotBefore); got != 7*24*time.Hour {
		t.Errorf("NotAfter - NotBefore = %s, want the 7-day maximum (long certificates lose the backdate from NotAfter)", got)
	}
}

// A forced rotation publishes old and new anchors before the first certificate from the
// new CA, which then verifies against what was already published; the old anchor stays.
func TestSigner_ForcedRotationIsTrustBeforeUse(t *testing.T) {
	cp := planes.Get(t, false)
	ctx := context.Background()
	store := liveStore(t, cp, false)
	before := leaf(t, waitDone(t, cp, requestAs(t, cp, "web", workload, nil, []string{spiffe(appNamespace, "web")}).Name))

	requested := time.Now()
	secrets := kube(t, cp.AdminConfig()).CoreV1().Secrets(signerNamespace)
	secret, err := secrets.Get(ctx, "trustsync-ca-trustsync.io-workload", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Annotations["trustsync.io/rotate-requested-at"] = time.Now().UTC().Format(time.RFC3339Nano)
	if _, err := secrets.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Both anchors are published...
	var published string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		b, err := store.Get(ctx, "trustsync.io:workload:live")
		if err != nil {
			return false, nil
		}
		certs, _ := bundle.ParseCertificates([]byte(b.Spec.TrustBundle))
		published = b.Spec.TrustBundle
		return len(certs) == 2, nil
	}); err != nil {
		t.Fatalf("old and new anchors were never published together: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(published))

	// ...before anything is signed by the new CA: keep asking until a certificate comes
	// from another issuer, and check it against what was published earlier.
	var after *x509.Certificate
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		after = leaf(t, waitDone(t, cp, requestAs(t, cp, "web", workload, nil, []string{spiffe(appNamespace, "web")}).Name))
		return string(after.RawIssuer) != string(before.RawIssuer) || !bytesEqual(after.AuthorityKeyId, before.AuthorityKeyId), nil
	}); err != nil {
		t.Fatalf("the new CA never signed: %v", err)
	}
	if _, err := after.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the first certificate of the new CA does not verify against the anchors published before it: %v", err)
	}
	// Signed at NotBefore + the backdate, to the second (X.509 times have no finer
	// precision); the new anchor was published after the request.
	if signed := after.NotBefore.Add(5 * time.Minute); signed.Sub(requested) < window-time.Second {
		t.Errorf("the new CA signed %s after the rotation was requested, less than the %s propagation window", signed.Sub(requested), window)
	}
	// The old anchor is still published: certificates it signed stay valid.
	current := livePool(t, store)
	if _, err := before.Verify(x509.VerifyOptions{Roots: current, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("a certificate of the old CA no longer verifies after the switch: %v", err)
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

func TestSigner_RestoresADeletedLiveBundle(t *testing.T) {
	for _, native := range []bool{true, false} {
		t.Run(mode(native), func(t *testing.T) {
			cp := planes.Get(t, native)
			ctx := context.Background()
			store := liveStore(t, cp, native)
			// The signer publishes on start; wait for it, then delete.
			original := publishedLive(t, store)
			if err := store.Delete(ctx, "trustsync.io:workload:live", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				b, err := store.Get(ctx, "trustsync.io:workload:live")
				if apierrors.IsNotFound(err) {
					return false, nil
				}
				return err == nil && b.Spec.TrustBundle == original && b.Labels["kubernetes.io/cluster-trust-bundle-version"] == "live", err
			}); err != nil {
				t.Fatalf("the live bundle was not restored: %v", err)
			}
		})
	}
}

func TestSigner_HoldsTheLease(t *testing.T) {
	cp := planes.Get(t, true)
	lease, err := kube(t, cp.AdminConfig()).CoordinationV1().Leases(signerNamespace).Get(context.Background(), "trustsync-signer", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatalf("lease = %+v, %v", lease, err)
	}
}

// The signer publishes with server-side apply as trustsync-signer: it owns the live
// bundle's content, signer and live label, restores them when someone else edits
// them, and leaves the labels and annotations other tools put there alone.
func TestSigner_PublishesWithServerSideApplyLeavingOthersFieldsAlone(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	store := liveStore(t, cp, true)
	original := publishedLive(t, store)
	b, err := store.Get(ctx, "trustsync.io:workload:live")
	if err != nil {
		t.Fatal(err)
	}
	b.Labels["team.example.com/owner"] = "platform"
	b.Annotations = map[string]string{"example.com/note": "kept"}
	b.Spec.TrustBundle = fixtures.Bundle(fixtures.CA("tampered"))
	if _, err := store.Update(ctx, b, metav1.UpdateOptions{FieldManager: "another-tool"}); err != nil {
		t.Fatal(err)
	}
	var got *certificatesv1.ClusterTrustBundle
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err = store.Get(ctx, "trustsync.io:workload:live")
		return err == nil && got.Spec.TrustBundle == original, nil
	}); err != nil {
		t.Fatalf("the tampered content was not restored: %v", err)
	}
	if got.Labels["team.example.com/owner"] != "platform" || got.Annotations["example.com/note"] != "kept" || got.Labels["kubernetes.io/cluster-trust-bundle-version"] != "live" {
		t.Errorf("labels %v, annotations %v: another tool's were lost or the live label is missing", got.Labels, got.Annotations)
	}
	applied := false
	for _, mf := range got.ManagedFields {
		applied = applied || (mf.Manager == "trustsync-signer" && mf.Operation == metav1.ManagedFieldsOperationApply)
	}
	if !applied {
		t.Errorf("no server-side apply by trustsync-signer in managedFields: %+v", got.ManagedFields)
	}
}

// publishedLive waits for the signer's live bundle and returns its content.
func publishedLive(t *testing.T, store *bundleapi.Store) string {
	t.Helper()
	var content string
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		b, err := store.Get(ctx, "trustsync.io:workload:live")
		if err == nil {
			content = b.Spec.TrustBundle
		}
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the signer published no live bundle within a minute: %v", err)
	}
	return content
}
