package webhook

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/tenancy"
	"github.com/trustsync/trustsync/tenancy/tenancytest"
)

// tenantServer serves pods with tenancy enforced: namespace ten-a is granted bundle
// corp-a and signer example.com/tenants' bundles labelled tenant=a,
// trustsync-system is exempt, and broken's grants cannot be told. Of that signer's
// bundles, example.com:tenants:a is labelled tenant=a and example.com:tenants:b
// tenant=b.
func tenantServer(t *testing.T) *testServer {
	t.Helper()
	grants := tenancytest.New(t, map[string]v1alpha1.TrustPolicySpec{"team-a": {NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
		Bundles: []v1alpha1.BundleGrant{{Name: "corp-a"}, {SignerName: "example.com/tenants", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "a"}}}}}})
	grants.Labels["ten-a"] = map[string]string{"team": "a"}
	grants.Exempt, grants.Unknown = "trustsync-system", "broken"
	bundles := func(name string) (tenancy.Bundle, bool) {
		tenant, ok := map[string]string{"example.com:tenants:a": "a", "example.com:tenants:b": "b"}[name]
		return tenancy.Bundle{Name: name, SignerName: "example.com/tenants", Labels: map[string]string{"tenant": tenant}}, ok
	}
	return enforcingPodServer(t, nil, grants.Lookup, bundles)
}

func TestPodAdmission_TenancyRefusesWhatANamespaceIsNotGranted(t *testing.T) {
	bundle := func(name string) map[string]string {
		return map[string]string{v1alpha1.AnnotationInject: "true", injector.AnnotationBundleName: name}
	}
	projected := func(ns, name string) request {
		r := podReq(ns, nil)
		pod := r.object.(*corev1.Pod)
		pod.Spec.Volumes = []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To(name), Path: "ca.pem"}}}}}}}
		return r
	}
	for _, tc := range []struct {
		name        string
		req         request
		wantAllowed bool
		wantMessage string
	}{
		{name: "a granted bundle is injected", req: podReq("ten-a", bundle("corp-a")), wantAllowed: true},
		{name: "an ungranted bundle by annotation is refused, naming it and the command",
			req:         podReq("ten-a", bundle("corp-b")),
			wantMessage: "trustsync: the pod's trustsync annotations: namespace ten-a may not trust bundle corp-b: no TrustPolicy grants it; kubectl trustsync grants -n ten-a"},
		{name: "an ungranted bundle in a projected volume written by hand is refused, without any annotation",
			req:         projected("ten-a", "corp-b"),
			wantMessage: "trustsync: volume roots (projected clusterTrustBundle): namespace ten-a may not trust bundle corp-b"},
		{name: "a granted projected bundle is let through", req: projected("ten-a", "corp-a"), wantAllowed: true},
		{name: "a bundle by name is granted by its signer's grant when it carries the granted labels",
			req: projected("ten-a", "example.com:tenants:a"), wantAllowed: true},
		{name: "a bundle by name of the granted signer but without the granted labels is refused",
			req:         podReq("ten-a", bundle("example.com:tenants:b")),
			wantMessage: "namespace ten-a may not trust bundle example.com:tenants:b: no TrustPolicy grants it"},
		{name: "a bundle by name that does not exist yet is not granted by labels it may never carry",
			req:         podReq("ten-a", bundle("example.com:tenants:later")),
			wantMessage: "namespace ten-a may not trust bundle example.com:tenants:later"},
		{name: "a namespace no policy selects is granted nothing",
			req: podReq("ten-b", bundle("corp-a")), wantMessage: "namespace ten-b may not trust bundle corp-a"},
		{name: "trustsync's own namespace is exempt", req: projected("trustsync-system", "corp-b"), wantAllowed: true},
		{name: "a pod asking nothing is never checked", req: podReq("broken", nil), wantAllowed: true},
		{name: "grants that cannot be told refuse the pod, saying why",
			req: podReq("broken", bundle("corp-a")), wantMessage: "trustsync: cannot tell what namespace broken is granted: the TrustPolicies and namespaces have not been listed yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := tenantServer(t).review(t, tc.req)
			if resp.Allowed != tc.wantAllowed {
				t.Fatalf("allowed = %v (%v)", resp.Allowed, resp.Result)
			}
			if tc.wantMessage != "" && !strings.Contains(resp.Result.Message, tc.wantMessage) {
				t.Errorf("message =\n  %s\nwant it to contain\n  %s", resp.Result.Message, tc.wantMessage)
			}
		})
	}
}
