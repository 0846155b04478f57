package signer

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/test/controlplane"
)

// With tenancy enforced, the signer certifies a ServiceAccount only for what its
// namespace's TrustPolicies grant: a DNS name within the grant's patterns is issued;
// one outside them, though the signer's own policy allows it, is denied naming the
// grant and the pattern; once the policy goes, the namespace is granted nothing, and
// the SPIFFE ID is still the requester's own.
func TestSigner_TenancyCertifiesOnlyWhatTheNamespaceIsGranted(t *testing.T) {
	const namespace, signer = "tenanted-signer", "example.com/tenanted"
	cp := planes.Get(t, true)
	ctx := context.Background()
	policies := grantApps(t, cp, "apps-web", "signers", map[string]any{"signerName": signer, "dnsNames": []any{"web.*.svc"}})
	startObservedSigner(t, cp, namespace, signer, "--ca-propagation=timed", "--tenancy-enforced")

	decided := func(dns string) *certificatesv1.CertificateSigningRequest {
		t.Helper()
		return waitDone(t, cp, requestAs(t, cp, "web", signer, nil, []string{spiffe(appNamespace, "web")}, dns).Name)
	}
	if csr := decided("web.apps.svc"); len(csr.Status.Certificate) == 0 {
		t.Fatalf("a DNS name within the grant was not issued: %+v", csr.Status.Conditions)
	} else if cert := leaf(t, csr); cert.URIs[0].String() != spiffe(appNamespace, "web") {
		t.Errorf("identity %v; want the requester's own", cert.URIs)
	}
	denied := func(csr *certificatesv1.CertificateSigningRequest, want string) {
		t.Helper()
		c := condition(csr, certificatesv1.CertificateDenied)
		if c == nil || c.Reason != "TrustsyncPolicyDenied" || !strings.Contains(c.Message, want) {
			t.Errorf("conditions %+v; want denied saying %q", csr.Status.Conditions, want)
		}
		if len(csr.Status.Certificate) > 0 {
			t.Error("a denied request was signed")
		}
	}
	denied(decided("db.apps.svc"), `namespace apps may not ask example.com/tenanted for DNS names db.apps.svc: TrustPolicy apps-web allows web.*.svc but not "db.apps.svc" (kubectl trustsync grants -n apps)`)

	if err := policies.Delete(ctx, "apps-web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		csr := decided("web.apps.svc")
		if c := condition(csr, certificatesv1.CertificateDenied); c != nil || time.Now().After(deadline) {
			denied(csr, "namespace apps may not ask example.com/tenanted for certificates: no TrustPolicy grants it; kubectl trustsync grants -n apps")
			break
		}
	}
}

// Approval left to an admin (the signer's policy has no approval rules), the grants
// still hold at signing: an approved request of a namespace not granted the DNS name
// fails naming the grant missing, and nothing is signed for it; one within the grant
// is issued.
func TestSigner_TenancyHoldsAtSigningWhoeverApproved(t *testing.T) {
	const namespace, signer = "tenanted-approved", "example.com/admin-approved"
	cp := planes.Get(t, true)
	ctx := context.Background()
	grantApps(t, cp, "apps-admin-approved", "signers", map[string]any{"signerName": signer, "dnsNames": []any{"web.*.svc"}})
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte("apiVersion: trustsync.io/v1alpha1\nkind: Policy\nsigners:\n- signerName: "+signer+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cp.CreateNamespace(ctx, namespace, nil); err != nil {
		t.Fatal(err)
	}
	p, err := cp.StartSigner("--namespace="+namespace, "--policy="+file, "--ca-propagation=timed", "--tenancy-enforced")
	untilTheEnd(t, "signer", p, err)

	csrs := kube(t, cp.AdminConfig()).CertificatesV1().CertificateSigningRequests()
	approved := func(dns string) *certificatesv1.CertificateSigningRequest {
		t.Helper()
		csr := requestAs(t, cp, "web", signer, nil, []string{spiffe(appNamespace, "web")}, dns)
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: "True", Reason: "AdminApproved", Message: "approved by hand"})
		if _, err := csrs.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return waitDone(t, cp, csr.Name)
	}
	if csr := approved("web.apps.svc"); len(csr.Status.Certificate) == 0 {
		t.Fatalf("an approved request within the grant was not issued: %+v", csr.Status.Conditions)
	}
	csr := approved("db.apps.svc")
	c := condition(csr, certificatesv1.CertificateFailed)
	if c == nil || c.Reason != v1alpha1.ReasonNotGranted || !strings.Contains(c.Message, `TrustPolicy apps-admin-approved allows web.*.svc but not "db.apps.svc"`) {
		t.Errorf("conditions %+v; want Failed NotGranted naming the grant's pattern", csr.Status.Conditions)
	}
	if len(csr.Status.Certificate) > 0 {
		t.Error("an approved request outside the grant was signed")
	}
}

// grantApps creates TrustPolicy name granting the app namespace the one grant of kind
// ("bundles" or "signers"), deleted when the test ends, and returns the policies.
func grantApps(t *testing.T, cp *controlplane.ControlPlane, name, kind string, grant map[string]any) dynamic.ResourceInterface {
	t.Helper()
	ctx := context.Background()
	if err := cp.InstallPoliciesCRD(ctx); err != nil {
		t.Fatal(err)
	}
	policies := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.TrustPolicyResource)
	if _, err := policies.Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "TrustPolicy",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": appNamespace}},
			kind: []any{grant}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = policies.Delete(ctx, name, metav1.DeleteOptions{}) })
	return policies
}
