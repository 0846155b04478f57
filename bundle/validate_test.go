package bundle

import (
	"slices"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/test/fixtures"
)

func ctb(name, signer, trustBundle string) *certificatesv1.ClusterTrustBundle {
	return &certificatesv1.ClusterTrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
		Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: trustBundle},
	}
}

func TestValidate(t *testing.T) {
	good := fixtures.Bundle(caA)
	tests := []struct {
		name   string
		form   Form
		bundle *certificatesv1.ClusterTrustBundle
		want   []string
	}{
		{name: "a valid native bundle for a signer", form: NativeForm, bundle: ctb("example.com:s:live", "example.com/s", good)},
		{name: "a valid mirror bundle for a signer", form: MirrorForm, bundle: ctb("example.com--s--live", "example.com/s", good)},
		{name: "a valid bundle without a signer", form: NativeForm, bundle: ctb("corp-root", "", good)},
		{name: "a kubernetes.io signer is accepted", form: NativeForm, bundle: ctb("kubernetes.io:kube-apiserver-serving:live", "kubernetes.io/kube-apiserver-serving", good)},
		{
			name:   "name, signer and bundle errors are all reported, in upstream's order",
			form:   NativeForm,
			bundle: ctb("wrong", "nodomain", ""),
			want: []string{
				`metadata.name: Invalid value: "wrong": ClusterTrustBundle for signerName nodomain must be named with prefix nodomain:`,
				`spec.signerName: Invalid value: "nodomain": must be a fully qualified domain and path of the form 'example.com/signer-name'`,
				invalid("at least one trust anchor must be provided"),
			},
		},
		{
			name:   "the mirror refuses the native name form",
			form:   MirrorForm,
			bundle: ctb("example.com:s:live", "example.com/s", good),
			want:   []string{`metadata.name: Invalid value: "example.com:s:live": ClusterTrustBundle for signerName example.com/s must be named with prefix example.com--s--`},
		},
		{
			name:   "a missing name is required",
			form:   NativeForm,
			bundle: ctb("", "", good),
			want:   []string{"metadata.name: Required value: name or generateName is required"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := messages(Validate(tc.bundle, tc.form))
			if !slices.Equal(got, tc.want) {
				t.Errorf("Validate() =\n  %q\nwant\n  %q", got, tc.want)
			}
		})
	}
}

func TestValidateUpdate(t *testing.T) {
	good, other := fixtures.Bundle(caA), fixtures.Bundle(caB)
	// A stored bundle that today's rules refuse (a leaf anchor): updates that leave
	// trustBundle alone must not be blocked by it.
	stale := fixtures.Bundle(leaf)
	withLabel := func(b *certificatesv1.ClusterTrustBundle) *certificatesv1.ClusterTrustBundle {
		b = b.DeepCopy()
		b.Labels = map[string]string{"team": "a"}
		return b
	}
	tests := []struct {
		name     string
		old, new *certificatesv1.ClusterTrustBundle
		want     []string
	}{
		{name: "changing the anchors is allowed", old: ctb("example.com:s:live", "example.com/s", good), new: ctb("example.com:s:live", "example.com/s", other)},
		{name: "an unchanged trustBundle is not parsed again", old: ctb("corp", "", stale), new: withLabel(ctb("corp", "", stale))},
		{
			name: "a changed trustBundle is parsed",
			old:  ctb("corp", "", good), new: ctb("corp", "", stale),
			want: []string{invalid("entry 0 does not have the CA bit set")},
		},
		{
			name: "changing signerName is refused",
			old:  ctb("example.com:s:live", "example.com/s", good), new: ctb("example.com:s:live", "example.com/t", good),
			want: []string{
				`metadata.name: Invalid value: "example.com:s:live": ClusterTrustBundle for signerName example.com/t must be named with prefix example.com:t:`,
				`spec.signerName: Invalid value: "example.com/t": field is immutable`,
			},
		},
		{
			name: "adding signerName is refused",
			old:  ctb("corp", "", good), new: ctb("corp", "example.com/s", good),
			want: []string{
				`metadata.name: Invalid value: "corp": ClusterTrustBundle for signerName example.com/s must be named with prefix example.com:s:`,
				`spec.signerName: Invalid value: "example.com/s": field is immutable`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := messages(ValidateUpdate(tc.new, tc.old, NativeForm))
			if !slices.Equal(got, tc.want) {
				t.Errorf("ValidateUpdate() =\n  %q\nwant\n  %q", got, tc.want)
			}
		})
	}
}
