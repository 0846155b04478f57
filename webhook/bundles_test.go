package webhook

import (
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trustsync/trustsync/test/fixtures"
)

const mirrorAPIVersion = "trustsync.io/v1alpha1"

var (
	anchor       = fixtures.MustNew(fixtures.Options{CommonName: "long-lived", NotBefore: testNow.Add(-time.Hour), NotAfter: testNow.Add(365 * 24 * time.Hour)})
	expiringSoon = fixtures.MustNew(fixtures.Options{CommonName: "expiring", NotBefore: testNow.Add(-time.Hour), NotAfter: testNow.Add(10*24*time.Hour + time.Hour)})
	expired      = fixtures.MustNew(fixtures.Options{CommonName: "expired", NotBefore: testNow.Add(-48 * time.Hour), NotAfter: testNow.Add(-24 * time.Hour)})
	notCA        = fixtures.MustNew(fixtures.Options{CommonName: "leaf", Leaf: true, Parent: anchor})
)

func ctbObject(apiVersion, name, signer string, anchors ...*fixtures.Cert) *certificatesv1.ClusterTrustBundle {
	return &certificatesv1.ClusterTrustBundle{
		TypeMeta:   metav1.TypeMeta{APIVersion: apiVersion, Kind: "ClusterTrustBundle"},
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "7"},
		Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: fixtures.Bundle(anchors...)},
	}
}

func mirrorReq(op admissionv1.Operation, user string, obj, old *certificatesv1.ClusterTrustBundle) request {
	r := request{path: routeBundles, op: op, group: "trustsync.io", version: "v1alpha1", kind: "ClusterTrustBundle", resource: "clustertrustbundles", user: user, object: obj}
	if old != nil {
		r.oldObject = old
	}
	return r
}

func nativeReq(obj *certificatesv1.ClusterTrustBundle) request {
	return request{path: routeBundles, op: admissionv1.Create, group: "certificates.k8s.io", version: "v1", kind: "ClusterTrustBundle", resource: "clustertrustbundles", object: obj}
}

func TestBundleAdmission_Mirror(t *testing.T) {
	grants := map[string][]string{
		"signer-admin": {"example.com/server-tls"},
		"domain-admin": {"example.com/*"},
	}
	signed := ctbObject(mirrorAPIVersion, "example.com--server-tls--live", "example.com/server-tls", anchor)
	withOwner := signed.DeepCopy()
	withOwner.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "u1"}}
	withFinalizer := signed.DeepCopy()
	withFinalizer.Finalizers = []string{"example.com/keep"}
	relabelled := signed.DeepCopy()
	relabelled.Labels = map[string]string{"kubernetes.io/cluster-trust-bundle-version": "live"}
	resigned := ctbObject(mirrorAPIVersion, "example.com--server-tls--live", "example.com/other", anchor)

	forbidden := `clustertrustbundles.trustsync.io "example.com--server-tls--live" is forbidden: user not permitted to attest for signerName "example.com/server-tls"`
	tests := []struct {
		name        string
		req         request
		wantAllowed bool
		wantMessage string
	}{
		{name: "a bundle without a signer needs no attest", req: mirrorReq(admissionv1.Create, "nobody", ctbObject(mirrorAPIVersion, "corp-root", "", anchor), nil), wantAllowed: true},
		{name: "a user without attest may not publish for a signer", req: mirrorReq(admissionv1.Create, "nobody", signed, nil), wantMessage: forbidden},
		{name: "attest on the signer name allows", req: mirrorReq(admissionv1.Create, "signer-admin", signed, nil), wantAllowed: true},
		{name: "attest on the signer's domain wildcard allows", req: mirrorReq(admissionv1.Create, "domain-admin", signed, nil), wantAllowed: true},
		{name: "an authorizer error denies", req: mirrorReq(admissionv1.Create, "broken", signed, nil), wantMessage: forbidden},
		{name: "an update that only adds an owner reference needs no attest", req: mirrorReq(admissionv1.Update, "nobody", withOwner, signed), wantAllowed: true},
		{name: "an update that only adds a finalizer needs no attest", req: mirrorReq(admissionv1.Update, "nobody", withFinalizer, signed), wantAllowed: true},
		{name: "an update of labels needs attest", req: mirrorReq(admissionv1.Update, "nobody", relabelled, signed), wantMessage: forbidden},
		{
			name:        "changing signerName is refused before attest is asked",
			req:         mirrorReq(admissionv1.Update, "domain-admin", resigned, signed),
			wantMessage: `ClusterTrustBundle.trustsync.io "example.com--server-tls--live" is invalid: [metadata.name: Invalid value: "example.com--server-tls--live": ClusterTrustBundle for signerName example.com/other must be named with prefix example.com--other--, spec.signerName: Invalid value: "example.com/other": field is immutable]`,
		},
		{
			name:        "the colon name form is refused in the mirror",
			req:         mirrorReq(admissionv1.Create, "signer-admin", ctbObject(mirrorAPIVersion, "example.com:server-tls:live", "example.com/server-tls", anchor), nil),
			wantMessage: `ClusterTrustBundle.trustsync.io "example.com:server-tls:live" is invalid: metadata.name: Invalid value: "example.com:server-tls:live": ClusterTrustBundle for signerName example.com/server-tls must be named with prefix example.com--server-tls--`,
		},
		{
			name:        "an empty bundle is refused with upstream's message",
			req:         mirrorReq(admissionv1.Create, "signer-admin", ctbObject(mirrorAPIVersion, "corp-root", ""), nil),
			wantMessage: `ClusterTrustBundle.trustsync.io "corp-root" is invalid: spec.trustBundle: Invalid value: "<value omitted>": at least one trust anchor must be provided`,
		},
		{
			name:        "a non-CA anchor is refused with upstream's message",
			req:         mirrorReq(admissionv1.Create, "signer-admin", ctbObject(mirrorAPIVersion, "corp-root", "", notCA), nil),
			wantMessage: `ClusterTrustBundle.trustsync.io "corp-root" is invalid: spec.trustBundle: Invalid value: "<value omitted>": entry 0 does not have the CA bit set`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, "", &fakeAuthorizer{grants: grants, errFor: "broken"})
			resp := s.review(t, tc.req)
			if resp.Allowed != tc.wantAllowed {
				t.Fatalf("allowed = %v, want %v (%v)", resp.Allowed, tc.wantAllowed, resp.Result)
			}
			if tc.wantMessage != "" && (resp.Result == nil || resp.Result.Message != tc.wantMessage) {
				t.Fatalf("message =\n  %v\nwant\n  %s", resp.Result, tc.wantMessage)
			}
		})
	}
}

func TestBundleAdmission_AttestAsksForTheNameThenTheDomainWildcard(t *testing.T) {
	s := newTestServer(t, "", &fakeAuthorizer{})
	s.review(t, mirrorReq(admissionv1.Create, "bob", ctbObject(mirrorAPIVersion, "example.com--s--live", "example.com/s", anchor), nil))
	want := []string{"bob attest example.com/s", "bob attest example.com/*"}
	if strings.Join(s.authz.calls, ";") != strings.Join(want, ";") {
		t.Errorf("authorizer calls = %q, want %q", s.authz.calls, want)
	}
	if got := s.counter(t, "trustsync_webhook_attest_decisions_total", map[string]string{"decision": "denied"}); got != 1 {
		t.Errorf("attest denied metric = %v, want 1", got)
	}
}

func TestBundleAdmission_Expiry(t *testing.T) {
	tests := []struct {
		name         string
		policy       string
		req          request
		wantAllowed  bool
		wantWarnings []string
		wantMessage  string
	}{
		{name: "a long-lived anchor gets no warning", req: nativeReq(ctbObject("certificates.k8s.io/v1", "corp", "", anchor)), wantAllowed: true},
		{
			name:         "a native anchor expiring within 30 days is admitted with a warning naming it",
			req:          nativeReq(ctbObject("certificates.k8s.io/v1", "corp", "", anchor, expiringSoon)),
			wantAllowed:  true,
			wantWarnings: []string{"trust anchor 1 (CN=expiring) expires on 2026-12-01T13:00:00Z, in 10 days"},
		},
		{
			name:         "an expired mirror anchor is admitted with a warning by default",
			req:          mirrorReq(admissionv1.Create, "x", ctbObject(mirrorAPIVersion, "corp", "", expired), nil),
			wantAllowed:  true,
			wantWarnings: []string{"trust anchor 0 (CN=expired) expired on 2026-11-20T12:00:00Z"},
		},
		{
			name:         "the warning window follows the policy",
			policy:       "bundles:\n  expiryWarningDays: 5\n",
			req:          nativeReq(ctbObject("certificates.k8s.io/v1", "corp", "", expiringSoon)),
			wantAllowed:  true,
			wantWarnings: nil,
		},
		{
			name:        "denyExpired refuses a native bundle holding an expired anchor",
			policy:      "bundles:\n  denyExpired: true\n",
			req:         nativeReq(ctbObject("certificates.k8s.io/v1", "corp", "", anchor, expired)),
			wantMessage: `ClusterTrustBundle.certificates.k8s.io "corp" is invalid: spec.trustBundle: Invalid value: "<value omitted>": entry 1 (CN=expired) expired on 2026-11-20T12:00:00Z, and policy (bundles.denyExpired) refuses expired anchors`,
		},
		{
			name:         "denyExpired does not block an update that leaves the anchors alone",
			policy:       "bundles:\n  denyExpired: true\n",
			req:          mirrorReq(admissionv1.Update, "x", withLabels(ctbObject(mirrorAPIVersion, "corp", "", expired)), ctbObject(mirrorAPIVersion, "corp", "", expired)),
			wantAllowed:  true,
			wantWarnings: []string{"trust anchor 0 (CN=expired) expired on 2026-11-20T12:00:00Z"},
		},
		{
			name:        "the native kind is not re-validated: the API server owns its rules",
			req:         nativeReq(ctbObject("certificates.k8s.io/v1", "not:valid:here", "", notCA)),
			wantAllowed: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, "apiVersion: trustsync.io/v1alpha1\nkind: Policy\n"+tc.policy, nil)
			resp := s.review(t, tc.req)
			if resp.Allowed != tc.wantAllowed {
				t.Fatalf("allowed = %v, want %v (%v)", resp.Allowed, tc.wantAllowed, resp.Result)
			}
			if strings.Join(resp.Warnings, "\n") != strings.Join(tc.wantWarnings, "\n") {
				t.Errorf("warnings =\n  %q\nwant\n  %q", resp.Warnings, tc.wantWarnings)
			}
			if tc.wantMessage != "" && (resp.Result == nil || resp.Result.Message != tc.wantMessage) {
				t.Errorf("message =\n  %v\nwant\n  %s", resp.Result, tc.wantMessage)
			}
		})
	}
}

func withLabels(b *certificatesv1.ClusterTrustBundle) *certificatesv1.ClusterTrustBundle {
	b.Labels = map[string]string{"team": "x"}
	return b
}

func TestOnlyGCFieldsChanged(t *testing.T) {
	base := func() *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": mirrorAPIVersion, "kind": "ClusterTrustBundle",
			"metadata": map[string]any{"name": "b", "resourceVersion": "1"},
			"spec":     map[string]any{"signerName": "a.io/b", "trustBundle": "x"},
		}}
	}
	changed := func(f func(u *unstructured.Unstructured)) *unstructured.Unstructured {
		u := base()
		f(u)
		return u
	}
	tests := []struct {
		name string
		new  *unstructured.Unstructured
		old  *unstructured.Unstructured
		want bool
	}{
		{"a create is never exempt", base(), nil, false},
		{"no change at all is exempt", base(), base(), true},
		{"owner references", changed(func(u *unstructured.Unstructured) {
			u.SetOwnerReferences([]metav1.OwnerReference{{Name: "o", UID: "1", Kind: "K", APIVersion: "v1"}})
		}), base(), true},
		{"finalizers", changed(func(u *unstructured.Unstructured) { u.SetFinalizers([]string{"f"}) }), base(), true},
		{"labels", changed(func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"a": "b"}) }), base(), false},
		{"anchors", changed(func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "y", "spec", "trustBundle")
		}), base(), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := onlyGCFieldsChanged(tc.new, tc.old); got != tc.want {
				t.Errorf("onlyGCFieldsChanged() = %v, want %v", got, tc.want)
			}
		})
	}
}
