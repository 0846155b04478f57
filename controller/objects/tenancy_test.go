package objects

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/tenancy/tenancytest"
)

func TestTenancy_SplitKeepsTheSourcesANamespaceIsGranted(t *testing.T) {
	grants := tenancytest.New(t, map[string]v1alpha1.TrustPolicySpec{"team-a": {NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
		Bundles: []v1alpha1.BundleGrant{{Name: "corp-a"}, {TrustDomain: "partner.example"}}}})
	grants.Labels["ten-a"] = map[string]string{"team": "a"}
	grants.Exempt, grants.Unknown = "trustsync-system", "unknown"
	enforced := Tenancy{Grants: grants.Lookup}
	corpA := v1alpha1.Source{Name: "corp-a", Path: "a.pem"}
	corpB := v1alpha1.Source{Name: "corp-b", Path: "b.pem"}
	partner := v1alpha1.Source{SignerName: v1alpha1.FederatedSignerName, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.TrustDomainLabel: "partner.example"}}, Path: "partner.pem"}
	roots := v1alpha1.Source{DefaultCAs: true, Path: "roots.pem"}
	for _, tc := range []struct {
		name           string
		tenancy        Tenancy
		namespace      string
		sources        []v1alpha1.Source
		wantGranted    []string
		wantRefused    string
		wantCannotTell bool
	}{
		{name: "everything granted is kept", tenancy: enforced, namespace: "ten-a", sources: []v1alpha1.Source{corpA, partner, roots}, wantGranted: []string{"a.pem", "partner.pem", "roots.pem"}},
		{name: "an ungranted source is left out and named", tenancy: enforced, namespace: "ten-a", sources: []v1alpha1.Source{corpA, corpB},
			wantGranted: []string{"a.pem"}, wantRefused: "b.pem (namespace ten-a may not trust bundle corp-b: no TrustPolicy grants it; kubectl trustsync grants -n ten-a)"},
		{name: "a tenant's many ungranted sources are named a few at a time", tenancy: enforced, namespace: "ten-a", sources: manyUngranted(7),
			wantRefused: "5.pem (namespace ten-a may not trust bundle corp-5: no TrustPolicy grants it; kubectl trustsync grants -n ten-a); and 2 more"},
		{name: "a namespace granted nothing keeps only the public roots", tenancy: enforced, namespace: "ten-b", sources: []v1alpha1.Source{corpA, roots},
			wantGranted: []string{"roots.pem"}, wantRefused: "a.pem (namespace ten-b may not trust bundle corp-a"},
		{name: "trustsync's own namespace is exempt", tenancy: enforced, namespace: "trustsync-system", sources: []v1alpha1.Source{corpB}, wantGranted: []string{"b.pem"}},
		{name: "a cluster-scoped object (a caBundle) is not a tenant's", tenancy: enforced, namespace: "", sources: []v1alpha1.Source{corpB}, wantGranted: []string{"b.pem"}},
		{name: "grants that cannot be told grant nothing and say so", tenancy: enforced, namespace: "unknown", sources: []v1alpha1.Source{corpA}, wantCannotTell: true},
		{name: "without enforcement everything is kept", namespace: "ten-b", sources: []v1alpha1.Source{corpB}, wantGranted: []string{"b.pem"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			granted, refused, err := tc.tenancy.Split(context.Background(), tc.namespace, tc.sources)
			if tc.wantCannotTell {
				if err == nil || !strings.Contains(err.Error(), "cannot tell what namespace unknown is granted") {
					t.Fatalf("err = %v, want it to say the grants cannot be told", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var paths []string
			for _, s := range granted {
				paths = append(paths, s.Path)
			}
			if strings.Join(paths, ",") != strings.Join(tc.wantGranted, ",") {
				t.Errorf("granted %v, want %v", paths, tc.wantGranted)
			}
			switch {
			case tc.wantRefused == "" && refused != nil:
				t.Errorf("refused %v", refused)
			case tc.wantRefused != "" && (refused == nil || !strings.Contains(refused.Error(), tc.wantRefused)):
				t.Errorf("refused = %v, want it to contain %s", refused, tc.wantRefused)
			}
		})
	}
}

// manyUngranted is n sources of bundles corp-1 to corp-n, none granted.
func manyUngranted(n int) []v1alpha1.Source {
	var out []v1alpha1.Source
	for i := 1; i <= n; i++ {
		out = append(out, v1alpha1.Source{Name: fmt.Sprintf("corp-%d", i), Path: fmt.Sprintf("%d.pem", i)})
	}
	return out
}
