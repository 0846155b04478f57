package v1alpha1

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseTrustTargetSpec_TakesBundlesIntoOneObjectAndSaysWhatItCannotDo(t *testing.T) {
	cm := Target{ConfigMap: &ObjectRef{Name: "roots"}}
	bundle := Source{Name: "corp", Path: "ca.crt"}
	for _, tc := range []struct {
		name string
		spec TrustTargetSpec
		want string // "" for valid
	}{
		{name: "a bundle into a ConfigMap", spec: TrustTargetSpec{Sources: []Source{bundle}, Target: cm}},
		{name: "a signer's bundles and the public roots merged, and a truststore", spec: TrustTargetSpec{Target: cm, Sources: []Source{
			{SignerName: "example.com/s", LabelSelector: &metav1.LabelSelector{}, Path: "ca.crt"}, {DefaultCAs: true, Path: "ca.crt"}, {Name: "corp", Path: "t.p12", Format: FormatPKCS12}}}},
		{name: "no source", spec: TrustTargetSpec{Target: cm}, want: "spec.sources: Required value"},
		{name: "a ConfigMap source", spec: TrustTargetSpec{Target: cm, Sources: []Source{{ConfigMap: &KeyRef{Name: "x", Key: "k"}, Path: "ca.crt"}}},
			want: "a ConfigMap or Secret source belongs to one namespace"},
		{name: "a password Secret", spec: TrustTargetSpec{Target: cm, Sources: []Source{{Name: "corp", Path: "t.jks", Format: FormatJKS, PasswordSecret: &KeyRef{Name: "p", Key: "k"}}}},
			want: `use the default password "changeit"`},
		{name: "a path that is not a key", spec: TrustTargetSpec{Target: cm, Sources: []Source{{Name: "corp", Path: "certs/ca.crt"}}},
			want: "must be a ConfigMap or Secret key"},
		{name: "both a ConfigMap and a Secret", spec: TrustTargetSpec{Sources: []Source{bundle}, Target: Target{ConfigMap: &ObjectRef{Name: "a"}, Secret: &ObjectRef{Name: "b"}}},
			want: "give exactly one of configMap and secret"},
		{name: "neither", spec: TrustTargetSpec{Sources: []Source{bundle}}, want: "give exactly one of configMap and secret"},
		{name: "a bad namespace selector", spec: TrustTargetSpec{Sources: []Source{bundle}, Target: Target{ConfigMap: &ObjectRef{Name: "a"},
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Near"}}}}}, want: "spec.target.namespaceSelector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTrustTargetSpec(&tc.spec)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v; want an error containing %q", err, tc.want)
			}
		})
	}
}
