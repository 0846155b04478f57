package bundle

import (
	"slices"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func labelled(name, signer string, labels map[string]string) *certificatesv1.ClusterTrustBundle {
	b := ctb(name, signer, "")
	b.Labels = labels
	return b
}

func TestSelect(t *testing.T) {
	live := map[string]string{"kubernetes.io/cluster-trust-bundle-version": "live"}
	bundles := []*certificatesv1.ClusterTrustBundle{
		labelled("example.com:s:live", "example.com/s", live),
		labelled("example.com:s:old", "example.com/s", map[string]string{"kubernetes.io/cluster-trust-bundle-version": "old"}),
		labelled("example.com:s2:live", "example.com/s2", live),
		labelled("corp-root", "", live),
	}
	tests := []struct {
		name string
		sel  Selector
		want []string
	}{
		{name: "by name picks that bundle only", sel: Selector{Name: "corp-root"}, want: []string{"corp-root"}},
		{name: "by name finds a signer's bundle too", sel: Selector{Name: "example.com:s:old"}, want: []string{"example.com:s:old"}},
		{name: "by a name that does not exist picks nothing", sel: Selector{Name: "absent"}},
		{name: "a nil label selector matches nothing", sel: Selector{SignerName: "example.com/s"}},
		{name: "an empty label selector matches all of the signer's bundles", sel: Selector{SignerName: "example.com/s", LabelSelector: &metav1.LabelSelector{}}, want: []string{"example.com:s:live", "example.com:s:old"}},
		{name: "labels narrow the signer's bundles", sel: Selector{SignerName: "example.com/s", LabelSelector: &metav1.LabelSelector{MatchLabels: live}}, want: []string{"example.com:s:live"}},
		{name: "the signer name must match exactly, not as a prefix", sel: Selector{SignerName: "example.com/s2", LabelSelector: &metav1.LabelSelector{}}, want: []string{"example.com:s2:live"}},
		{
			name: "expressions work as in any label selector",
			sel: Selector{SignerName: "example.com/s", LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/cluster-trust-bundle-version", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"live"}},
			}}},
			want: []string{"example.com:s:old"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := selectBundles(bundles, tc.sel)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, b := range got {
				names = append(names, b.Name)
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("selected %q, want %q", names, tc.want)
			}
		})
	}
}

func TestSelector_Validate(t *testing.T) {
	p := field.NewPath("sources").Index(0)
	tests := []struct {
		name string
		sel  Selector
		want []string
	}{
		{name: "a name alone is valid", sel: Selector{Name: "example.com:s:live"}},
		{name: "a signer with a selector is valid", sel: Selector{SignerName: "example.com/s", LabelSelector: &metav1.LabelSelector{}}},
		{name: "a signer without a selector is valid and matches nothing", sel: Selector{SignerName: "example.com/s"}},
		{name: "neither name nor signer is required", sel: Selector{}, want: []string{"sources[0]: Required value: either name or signerName must be specified"}},
		{name: "both name and signer is refused", sel: Selector{Name: "a", SignerName: "example.com/s"}, want: []string{`sources[0]: Invalid value: "a": only one of name and signerName may be used`}},
		{
			name: "a name must follow the bundle name rule of the signer it claims",
			sel:  Selector{Name: "example.com:s:"},
			want: []string{`sources[0].name: Invalid value: "example.com:s:": not a valid clustertrustbundlename: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		},
		{
			name: "a selector with a name is refused",
			sel:  Selector{Name: "corp", LabelSelector: &metav1.LabelSelector{}},
			want: []string{`sources[0].labelSelector: Invalid value: {}: labelSelector must be unset if name is specified`},
		},
		{name: "a bad signer name is reported on signerName", sel: Selector{SignerName: "nodomain"}, want: []string{`sources[0].signerName: Invalid value: "nodomain": must be a fully qualified domain and path of the form 'example.com/signer-name'`}},
		{
			name: "a bad selector operator is reported on labelSelector",
			sel:  Selector{SignerName: "example.com/s", LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}},
			want: []string{`sources[0].labelSelector.matchExpressions[0].operator: Invalid value: "Near": not a valid selector operator`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := messages(tc.sel.Validate(p))
			if !slices.Equal(got, tc.want) {
				t.Errorf("Validate() =\n  %q\nwant\n  %q", got, tc.want)
			}
		})
	}
}

func TestSelector_OverLongSelectorIsRefused(t *testing.T) {
	values := make([]string, 0, 12000)
	for i := range 12000 {
		values = append(values, strings.Repeat("v", 8)+string(rune('a'+i%26)))
	}
	sel := Selector{SignerName: "example.com/s", LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "k", Operator: metav1.LabelSelectorOpIn, Values: values},
	}}}
	if errs := sel.Validate(field.NewPath("s")); !slices.ContainsFunc(messages(errs), func(m string) bool { return strings.Contains(m, "may not be more than 102400 bytes") }) {
		t.Errorf("Validate() = %q, want a too-long error", messages(errs))
	}
	if _, err := sel.Matcher(); err == nil || !strings.Contains(err.Error(), "more than the 102400 allowed") {
		t.Errorf("Matcher() error = %v, want too long", err)
	}
}

func TestSelector_ListOptions(t *testing.T) {
	live := &metav1.LabelSelector{MatchLabels: map[string]string{"v": "live"}}
	tests := []struct {
		name   string
		sel    Selector
		form   Form
		want   metav1.ListOptions
		wantOK bool
	}{
		{name: "a name is a metadata.name field selector", sel: Selector{Name: "example.com:s:live"}, form: NativeForm, want: metav1.ListOptions{FieldSelector: "metadata.name=example.com:s:live"}, wantOK: true},
		{name: "a name is in the mirror's form for the mirror", sel: Selector{Name: "example.com:s:live"}, form: MirrorForm, want: metav1.ListOptions{FieldSelector: "metadata.name=example.com--s--live"}, wantOK: true},
		{name: "a signer is a spec.signerName field selector plus the labels", sel: Selector{SignerName: "example.com/s", LabelSelector: live}, form: MirrorForm, want: metav1.ListOptions{FieldSelector: "spec.signerName=example.com/s", LabelSelector: "v=live"}, wantOK: true},
		{name: "an empty selector lists all of the signer's bundles", sel: Selector{SignerName: "example.com/s", LabelSelector: &metav1.LabelSelector{}}, form: NativeForm, want: metav1.ListOptions{FieldSelector: "spec.signerName=example.com/s"}, wantOK: true},
		{name: "a nil selector has nothing to list", sel: Selector{SignerName: "example.com/s"}, form: NativeForm},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := tc.sel.ListOptions(tc.form)
			if err != nil || ok != tc.wantOK || got != tc.want {
				t.Errorf("ListOptions() = %+v, %v, %v; want %+v, %v", got, ok, err, tc.want, tc.wantOK)
			}
		})
	}
}

// selectBundles is what s.Matcher picks out of bundles, in their given order.
func selectBundles(bundles []*certificatesv1.ClusterTrustBundle, s Selector) ([]*certificatesv1.ClusterTrustBundle, error) {
	match, err := s.Matcher()
	if err != nil {
		return nil, err
	}
	var out []*certificatesv1.ClusterTrustBundle
	for _, b := range bundles {
		if match(b) {
			out = append(out, b)
		}
	}
	return out, nil
}
