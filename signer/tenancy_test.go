package signer

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/tenancy"
	"github.com/trustsync/trustsync/tenancy/tenancytest"
)

func TestNotGranted_ARequestIsDecidedByItsNamespacesGrantsOrRetried(t *testing.T) {
	fake := tenancytest.New(t, map[string]v1alpha1.TrustPolicySpec{"web": {NamespaceSelector: &metav1.LabelSelector{},
		Signers: []v1alpha1.SignerGrant{{SignerName: "example.com/s", DNSNames: []string{"web.*.svc"}}}}})
	fake.Exempt, fake.Unknown = "trustsync", "unlisted"
	grants := tenancy.Lookup(fake.Lookup)
	for _, tc := range []struct {
		name, namespace, signer string
		dns                     []string
		grants                  tenancy.Lookup
		want, wantErr           string
	}{
		{name: "without enforcement nothing is refused", namespace: "apps", signer: "example.com/other"},
		{name: "a name within the grant's patterns", grants: grants, namespace: "apps", signer: "example.com/s", dns: []string{"web.apps.svc"}},
		{name: "no DNS name at all (a pod certificate whose signer sets none)", grants: grants, namespace: "apps", signer: "example.com/s"},
		{name: "a name outside the patterns names the policy and the pattern", grants: grants, namespace: "apps", signer: "example.com/s", dns: []string{"db.apps.svc"},
			want: `TrustPolicy web allows web.*.svc but not "db.apps.svc"`},
		{name: "a signer not granted", grants: grants, namespace: "apps", signer: "example.com/other",
			want: "namespace apps may not ask example.com/other for certificates: no TrustPolicy grants it"},
		{name: "the release namespace is exempt", grants: grants, namespace: "trustsync", signer: "example.com/other"},
		{name: "grants that cannot be told are retried, not decided", grants: grants, namespace: "unlisted", signer: "example.com/s",
			wantErr: "cannot tell what namespace unlisted is granted: the TrustPolicies and namespaces have not been listed yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, err := notGranted(context.Background(), tc.grants, tc.namespace, tc.signer, tc.dns)
			if (err == nil) != (tc.wantErr == "") || (err != nil && err.Error() != tc.wantErr) {
				t.Fatalf("error %v; want %q", err, tc.wantErr)
			}
			if (why == "") != (tc.want == "") || !strings.Contains(why, tc.want) {
				t.Errorf("refusal %q; want one saying %q", why, tc.want)
			}
		})
	}
}

// A rotation stops waiting only for pods of namespaces it knows are not granted the
// bundle: one whose grants cannot be told (going, or not listed yet) is left out of
// the grants, so its pods are waited for as any other's, and so is the exempt one.
func TestGrantsOf_LeavesOutWhatItCannotTellAndTheExempt(t *testing.T) {
	fake := tenancytest.New(t, map[string]v1alpha1.TrustPolicySpec{"web": {NamespaceSelector: &metav1.LabelSelector{},
		Bundles: []v1alpha1.BundleGrant{{Name: "corp"}}}})
	fake.Exempt, fake.Unknown = "trustsync", "unlisted"
	pod := func(ns string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}}
	}
	got, err := grantsOf(context.Background(), fake.Lookup, []*corev1.Pod{pod("apps"), pod("apps"), pod("trustsync"), pod("unlisted")})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["apps"]; !ok || len(got) != 1 {
		t.Errorf("grants of %v; want apps alone (trustsync exempt, unlisted not told)", got)
	}
	if none, _ := grantsOf(context.Background(), nil, []*corev1.Pod{pod("apps")}); none != nil {
		t.Errorf("grants without enforcement: %v, want none", none)
	}
}
