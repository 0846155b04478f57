package bundles

import (
	"errors"
	"slices"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

// The API server is the specification: every case here is sent to a real
// kube-apiserver serving the native API, and bundle.Validate must give exactly the
// causes it gives (field and message), no more and no fewer.
func TestValidate_AgreesWithTheAPIServer(t *testing.T) {
	cp := cluster(t, true)
	ctx := controlplane.Context(t)
	s := store(t, cp.AdminConfig(), bundle.NativeV1)

	caA, caB := fixtures.CA("a"), fixtures.CA("b")
	leaf := fixtures.MustNew(fixtures.Options{Leaf: true, Parent: caA})
	key := string(caA.KeyPEM())
	good := fixtures.Bundle(caA)
	overLimit := good + strings.Repeat("x", bundle.MaxTrustBundleSize)

	cases := []struct {
		name, object, signer, trustBundle string
	}{
		{"valid with signer", "example.com:agree:live", "example.com/agree", good},
		{"valid without signer", "agree-plain", "", fixtures.Bundle(caA, caB)},
		{"valid under kubernetes.io", "kubernetes.io:agree:live", "kubernetes.io/agree", good},
		{"empty", "agree-empty", "", ""},
		{"text only", "agree-text", "", "hello\n"},
		{"private key", "agree-key", "", good + key},
		{"headers", "agree-headers", "", fixtures.Block("CERTIFICATE", caA.Cert.Raw, map[string]string{"A": "b"})},
		{"not X.509", "agree-junk", "", fixtures.Block("CERTIFICATE", []byte("junk"), nil)},
		{"not a CA", "agree-leaf", "", fixtures.Bundle(leaf)},
		{"several bad entries", "agree-many", "", key + fixtures.Bundle(leaf) + fixtures.Block("CERTIFICATE", []byte{1}, nil)},
		{"one duplicate", "agree-dup", "", fixtures.Bundle(caA, caB, caA)},
		{"two duplicates", "agree-dup2", "", fixtures.Bundle(caA, caB, caB, caA)},
		{"over 1 MiB", "agree-big", "", overLimit},
		{"colon without signer", "agree:colon", "", good},
		{"wrong prefix", "example.com:other:x", "example.com/agree", good},
		{"empty suffix", "example.com:agree:", "example.com/agree", good},
		{"signer without slash", "nodomain:x", "nodomain", good},
		{"signer with one-label domain", "localhost:s:x", "localhost/s", good},
		{"signer with bad label", "Example.com:s:x", "Example.com/s", good},
		{"everything wrong", "bad", "localhost/s", key},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := &certificatesv1.ClusterTrustBundle{
				ObjectMeta: metav1.ObjectMeta{Name: tc.object},
				Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: tc.signer, TrustBundle: tc.trustBundle},
			}
			ours := causesOf(bundle.Validate(b, bundle.NativeForm))
			_, err := s.Create(ctx, b, metav1.CreateOptions{})
			theirs, ok := apiCauses(err)
			if !ok {
				t.Fatalf("API server: %v", err)
			}
			if !slices.Equal(ours, theirs) {
				t.Errorf("bundle.Validate gives\n  %q\nthe API server gives\n  %q", ours, theirs)
			}
		})
	}
}

// causesOf renders field errors as the API server's status causes render them.
func causesOf(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Field+": "+e.ErrorBody())
	}
	slices.Sort(out)
	return out
}

// apiCauses returns the causes of an Invalid error, sorted, or none for success.
func apiCauses(err error) ([]string, bool) {
	if err == nil {
		return nil, true
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsInvalid(err) || status.Status().Details == nil {
		return nil, false
	}
	var out []string
	for _, c := range status.Status().Details.Causes {
		out = append(out, c.Field+": "+c.Message)
	}
	slices.Sort(out)
	return out, true
}
