package signer

import (
	"context"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/trustsync/trustsync/keyuri"
	"github.com/trustsync/trustsync/signer/keeper"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/softhsm"
)

// tokenKeys is a signer's keys in a fresh SoftHSM2 token, under object "ca".
func tokenKeys(t testing.TB) (caKeys, *softhsm.Token) {
	t.Helper()
	tok := softhsm.New(t, "trustsync")
	ref, err := keyuri.Parse(tok.KeyRef("ca"))
	if err != nil {
		t.Fatal(err)
	}
	k, err := keeper.Open(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return caKeys{keeper: k}, tok
}

// A rotation in a keeper, a restart (the Secret read back) between every step: the
// Secret holds certificates and where each key is, never a key; the next CA's key is
// made in the token beside the first; the retired CA's key is named unused when its
// anchor goes, and is not destroyed.
func TestKeeperRotation_TheSecretNamesKeysAndNeverHoldsOne(t *testing.T) {
	ctx := context.Background()
	keys, _ := tokenKeys(t)
	gen := func(t time.Time) (*CA, error) {
		return generateCA(ctx, "example.com/s", t, testRotation.Validity, keys, false)
	}
	first, err := generateCA(ctx, "example.com/s", t0, testRotation.Validity, keys, true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(first.KeyRef, ";object=ca") {
		t.Errorf("the first CA's key is %q, want the keyRef's own object, ca", first.KeyRef)
	}
	st := &caState{Current: first, Managed: true}

	saveAndRead := func(st *caState) (*caState, *corev1.Secret) {
		t.Helper()
		s := &corev1.Secret{}
		if err := applyToSecret(st, s); err != nil {
			t.Fatal(err)
		}
		for k, v := range s.Data {
			if strings.Contains(string(v), "PRIVATE KEY") {
				t.Fatalf("the Secret's %s holds a private key", k)
			}
		}
		back, err := stateFromSecret(ctx, s, keys)
		if err != nil {
			t.Fatal(err)
		}
		return back, s
	}

	if _, _, err := st.advance(t0.Add(51*time.Hour), testRotation, false, gen); err != nil {
		t.Fatal(err)
	}
	st, s := saveAndRead(st)
	if st.Next == nil || st.Next.KeyRef == "" || st.Next.KeyRef == first.KeyRef {
		t.Fatalf("the next CA's key is %+v, want a new key in the token", st.Next)
	}
	if s.Annotations[AnnotationKey] != first.KeyRef || s.Annotations[AnnotationNextKey] != st.Next.KeyRef || len(s.Data[corev1.TLSPrivateKeyKey]) != 0 {
		t.Errorf("the Secret records keys %q and %q (tls.key %d bytes), want %q and %q and an empty tls.key", s.Annotations[AnnotationKey], s.Annotations[AnnotationNextKey], len(s.Data[corev1.TLSPrivateKeyKey]), first.KeyRef, st.Next.KeyRef)
	}
	if !strings.Contains(st.Next.KeyRef, "object=ca-20") {
		t.Errorf("the next key is %q, want it named for the keyRef's object and the time", st.Next.KeyRef)
	}
	nextKey := st.Next.KeyRef

	st.markPublished(t0.Add(51 * time.Hour))
	if _, _, err := st.advance(t0.Add(52*time.Hour), testRotation, false, gen); err != nil {
		t.Fatal(err)
	}
	st, s = saveAndRead(st)
	if st.Current.KeyRef != nextKey || len(st.Retired) != 1 || st.Retired[0].KeyRef != first.KeyRef {
		t.Fatalf("after the switch the signing key is %q and the retired %+v; want %q signing and %q retired", st.Current.KeyRef, st.Retired, nextKey, first.KeyRef)
	}
	if s.Annotations[AnnotationRetiredKeys] == "" {
		t.Error("the Secret does not record the retired CA's key")
	}
	// The new CA signs through the token.
	signWith(t, st.Current, t0.Add(52*time.Hour))

	if _, _, err := st.advance(st.Retired[0].Until, testRotation, false, gen); err != nil {
		t.Fatal(err)
	}
	if len(st.Unused) != 1 || st.Unused[0] != first.KeyRef {
		t.Errorf("when the retired anchor went, unused keys were %v, want [%s]", st.Unused, first.KeyRef)
	}
	if k, err := keys.keeper.Find(ctx, first.KeyRef); err != nil || k == nil {
		t.Errorf("the retired key is gone from the token (%v): trustsync must never destroy a key", err)
	}
}

func signWith(t *testing.T, ca *CA, at time.Time) *x509.Certificate {
	t.Helper()
	req, _ := fixtures.CSR("", []string{"a.example.com"}, nil)
	_, leaf, err := sign(&certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{Request: req, Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}}}, ca, time.Hour, at)
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.CheckSignatureFrom(ca.Cert); err != nil {
		t.Fatalf("the leaf does not verify against the CA: %v", err)
	}
	return leaf
}

func TestResolve_FindsEachCAsKeyWhereItsSecretSays(t *testing.T) {
	ctx := context.Background()
	keys, _ := tokenKeys(t)
	inToken, err := generateCA(ctx, "example.com/s", time.Now(), time.Hour*100, keys, true)
	if err != nil {
		t.Fatal(err)
	}
	inSecret, err := generateCA(ctx, "example.com/s", time.Now(), time.Hour*100, caKeys{}, true)
	if err != nil {
		t.Fatal(err)
	}
	_, softPEM, _ := encodeCA(inSecret)
	tokenCert := encodeCerts(inToken.Cert)
	for _, tc := range []struct {
		name           string
		keys           caKeys
		cert, keyPEM   []byte
		where, says    string
		wantKeeperSigs bool
	}{
		{name: "a key the Secret holds signs as before, keeper or not", keys: keys, cert: encodeCerts(inSecret.Cert), keyPEM: softPEM},
		{name: "a key recorded in the token signs through it", keys: keys, cert: tokenCert, where: inToken.KeyRef, wantKeeperSigs: true},
		{name: "a certificate alone is the keyRef's own key, brought in", keys: keys, cert: tokenCert, wantKeeperSigs: true},
		{name: "a Secret holding a key and naming another is refused", keys: keys, cert: tokenCert, keyPEM: softPEM, where: inToken.KeyRef, says: "remove one of them"},
		{name: "a key in a keeper without a keyRef is refused, naming what to set", keys: caKeys{}, cert: tokenCert, where: inToken.KeyRef, says: "set the signer's keyRef"},
		{name: "a certificate alone without a keyRef is refused", keys: caKeys{}, cert: tokenCert, says: "holds no CA key"},
		{name: "a software CA's certificate with the token's key is refused", keys: keys, cert: encodeCerts(inSecret.Cert), where: inToken.KeyRef, says: "not the key of the CA certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, err := decodeCA(ctx, tc.cert, tc.keyPEM, tc.where, tc.keys)
			if tc.says != "" {
				if err == nil || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("decodeCA = %v, want an error saying %q", err, tc.says)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (ca.KeyRef != "") != tc.wantKeeperSigs {
				t.Errorf("the CA's key is at %q, want it in the keeper: %v", ca.KeyRef, tc.wantKeeperSigs)
			}
			signWith(t, ca, time.Now())
		})
	}
}

func TestIssue_AKeeperThatCannotSignIsAnUnavailableErrorNotAFailure(t *testing.T) {
	ctx := context.Background()
	keys, tok := tokenKeys(t)
	ca, err := generateCA(ctx, "example.com/s", time.Now(), time.Hour*100, keys, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.Pull(); err != nil {
		t.Fatal(err)
	}
	req, _ := fixtures.CSR("", []string{"a.example.com"}, nil)
	_, _, err = sign(&certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{Request: req, Usages: []certificatesv1.KeyUsage{certificatesv1.UsageServerAuth}}}, ca, time.Hour, time.Now())
	var unavailable *keeper.UnavailableError
	if !errors.As(err, &unavailable) {
		t.Fatalf("signing with the token pulled = %v (%T), want a *keeper.UnavailableError the request waits on", err, err)
	}
	if _, refused := asRefusal(err); refused {
		t.Error("a keeper that cannot sign became a refusal, which fails the request for good")
	}
}

func TestSetWaiting_TellsAWaitOnceAndClosesItWhenIssued(t *testing.T) {
	csr := &certificatesv1.CertificateSigningRequest{}
	now := time.Now()
	if setWaiting(csr, corev1.ConditionFalse, "Issued", "Issued", now) || len(csr.Status.Conditions) != 0 {
		t.Fatal("a CSR that never waited got a Waiting condition when issued")
	}
	if !setWaiting(csr, corev1.ConditionTrue, "KeyUnavailable", "token gone", now) {
		t.Fatal("the first wait was not recorded")
	}
	if setWaiting(csr, corev1.ConditionTrue, "KeyUnavailable", "token gone", now.Add(time.Second)) {
		t.Error("the same wait was recorded again: every retry would write the CSR")
	}
	if !setWaiting(csr, corev1.ConditionFalse, "Issued", "Issued", now.Add(2*time.Second)) {
		t.Fatal("issuing did not close the wait")
	}
	c := csr.Status.Conditions[0]
	if len(csr.Status.Conditions) != 1 || c.Type != "Waiting" || c.Status != corev1.ConditionFalse || !c.LastTransitionTime.Time.Equal(now.Add(2*time.Second).Truncate(time.Second)) && !c.LastTransitionTime.Time.Equal(now.Add(2*time.Second)) {
		t.Errorf("conditions are %+v, want one Waiting False since it was issued", csr.Status.Conditions)
	}
}

// A signer given a keyRef while its CA's key is in its Secret keeps signing with it,
// and its next rotation moves signing into the keeper: the next key is made there,
// and once it signs the Secret (still kubernetes.io/tls) holds no key.
func TestKeeperRotation_MovesASecretHeldCAIntoTheKeeper(t *testing.T) {
	ctx := context.Background()
	keys, _ := tokenKeys(t)
	soft, err := generateCA(ctx, "example.com/s", t0, testRotation.Validity, caKeys{}, true)
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{Type: corev1.SecretTypeTLS}
	if err := applyToSecret(&caState{Current: soft, Managed: true}, s); err != nil {
		t.Fatal(err)
	}
	st, err := stateFromSecret(ctx, s, keys)
	if err != nil || st.Current.KeyRef != "" {
		t.Fatalf("with a keyRef, the Secret's own key reads as %+v, %v; want it, held by the Secret", st, err)
	}
	gen := func(t time.Time) (*CA, error) {
		return generateCA(ctx, "example.com/s", t, testRotation.Validity, keys, false)
	}
	st.RotateRequested = "now"
	if _, _, err := st.advance(t0.Add(time.Hour), testRotation, false, gen); err != nil {
		t.Fatal(err)
	}
	st.markPublished(t0.Add(time.Hour))
	if _, _, err := st.advance(t0.Add(2*time.Hour), testRotation, false, gen); err != nil {
		t.Fatal(err)
	}
	if err := applyToSecret(st, s); err != nil {
		t.Fatal(err)
	}
	if key, ok := s.Data[corev1.TLSPrivateKeyKey]; !ok || len(key) != 0 || s.Annotations[AnnotationKey] == "" {
		t.Errorf("after the switch tls.key is %d bytes (present: %v) and the key recorded at %q; want an empty tls.key and the keeper's key", len(key), ok, s.Annotations[AnnotationKey])
	}
	back, err := stateFromSecret(ctx, s, keys)
	if err != nil {
		t.Fatal(err)
	}
	signWith(t, back.Current, t0.Add(2*time.Hour))
}
