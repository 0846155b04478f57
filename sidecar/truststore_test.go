package sidecar

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/bundle/truststore"
	"github.com/trustsync/trustsync/test/fixtures"
)

func readStore(t *testing.T, dir, path, format, password string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, path))
	if err != nil {
		t.Fatal(err)
	}
	var ders [][]byte
	if format == "jks" {
		ders, err = truststore.DecodeJKS(data, password)
	} else {
		ders, err = truststore.DecodePKCS12(data, password)
	}
	if err != nil {
		t.Fatalf("%s does not open with password %q: %v", path, password, err)
	}
	return ders
}

func holds(ders [][]byte, certs ...*fixtures.Cert) bool {
	if len(ders) != len(certs) {
		return false
	}
	for _, c := range certs {
		if !slices.ContainsFunc(ders, func(d []byte) bool { return bytes.Equal(d, c.Cert.Raw) }) {
			return false
		}
	}
	return true
}

func passwordSecret(password string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "store-pass", Namespace: "apps"}, Data: map[string][]byte{"password": []byte(password)}}
}

func TestSync_TruststoresHoldTheMergedAnchors(t *testing.T) {
	for _, format := range []string{"pkcs12", "jks"} {
		t.Run(format, func(t *testing.T) {
			w := newWorld()
			a, b := fixtures.CA("a"), fixtures.CA("b")
			_ = w.native.Add(ctb("one", "", nil, a))
			_ = w.native.Add(ctb("two", "", nil, b, a))
			_ = w.secrets.Add(passwordSecret("s3cret-from-a-Secret"))
			dir := t.TempDir()
			s, _ := newTestSyncer(t, w, NewAtomicWriter(dir), `[
				{"name": "one", "path": "default.store", "format": "`+format+`"},
				{"name": "two", "path": "default.store", "format": "`+format+`"},
				{"name": "two", "path": "secret.store", "format": "`+format+`", "passwordSecret": {"name": "store-pass", "key": "password"}},
				{"name": "one", "path": "ca.pem"}]`)
			if res := s.sync(); res.Err() != nil {
				t.Fatal(res.Err())
			}
			if got := readStore(t, dir, "default.store", format, "changeit"); !holds(got, a, b) {
				t.Errorf("default.store holds %d certificates, want a and b once each", len(got))
			}
			if got := readStore(t, dir, "secret.store", format, "s3cret-from-a-Secret"); !holds(got, a, b) {
				t.Errorf("secret.store holds %d certificates, want a and b", len(got))
			}
			if got := certsIn(t, dir, "ca.pem"); len(got) != 1 {
				t.Errorf("the PEM file beside the stores holds %v", got)
			}
		})
	}
}

// A PKCS#12 store is salted anew at each encoding, so encoding it at every sync
// would change the file (and wake whatever watches it) for nothing.
func TestSync_AStoreIsRewrittenOnlyWhenItsSetOrPasswordChanges(t *testing.T) {
	w := newWorld()
	a, b := fixtures.CA("a"), fixtures.CA("b")
	_ = w.native.Add(ctb("one", "", nil, a, b))
	_ = w.secrets.Add(passwordSecret("first"))
	dir := t.TempDir()
	sourcesJSON := `[{"name": "one", "path": "t.p12", "format": "pkcs12", "passwordSecret": {"name": "store-pass", "key": "password"}}]`
	s, _ := newTestSyncer(t, w, NewAtomicWriter(dir), sourcesJSON)
	read := func() []byte { data, _ := os.ReadFile(filepath.Join(dir, "t.p12")); return data }
	s.sync()
	first := read()

	_ = w.native.Update(ctb("one", "", nil, b, a, b)) // same set, other order, a duplicate
	if res := s.sync(); res.changed || !bytes.Equal(read(), first) {
		t.Fatal("the same set of anchors re-encoded the store")
	}
	restarted, _ := newTestSyncer(t, w, NewAtomicWriter(dir), sourcesJSON)
	if res := restarted.sync(); res.changed || !bytes.Equal(read(), first) {
		t.Fatal("a restarted sidecar re-encoded a store that holds the same set")
	}

	c := fixtures.CA("c")
	_ = w.native.Update(ctb("one", "", nil, a, b, c))
	if res := restarted.sync(); !res.changed || !holds(readStore(t, dir, "t.p12", "pkcs12", "first"), a, b, c) {
		t.Fatal("a new anchor did not reach the store")
	}
	_ = w.secrets.Update(passwordSecret("second"))
	if res := restarted.sync(); !res.changed || !holds(readStore(t, dir, "t.p12", "pkcs12", "second"), a, b, c) {
		t.Fatal("a new password did not re-encode the store")
	}
}

func TestSync_ABadPasswordSecretHoldsTheStoreAtItsLastGoodContent(t *testing.T) {
	a := fixtures.CA("a")
	tests := []struct {
		name    string
		secret  *corev1.Secret
		wantErr string
	}{
		{"a missing Secret", nil, `t.jks: passwordSecret apps/store-pass (the password of t.jks) not found; create the Secret with the key "password", or drop passwordSecret to use the default password "changeit"`},
		{"a missing key", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "store-pass", Namespace: "apps"}, Data: map[string][]byte{"pass": []byte("x")}},
			`t.jks: passwordSecret apps/store-pass (the password of t.jks) has no key "password"`},
		{"an empty password", passwordSecret(""), `t.jks: passwordSecret apps/store-pass key "password" (the password of t.jks) is empty; a truststore needs a password`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			_ = w.native.Add(ctb("one", "", nil, a))
			_ = w.secrets.Add(passwordSecret("good"))
			dir := t.TempDir()
			s, events := newTestSyncer(t, w, NewAtomicWriter(dir), `[{"name": "one", "path": "t.jks", "format": "jks", "passwordSecret": {"name": "store-pass", "key": "password"}}]`)
			s.sync()
			before, _ := os.ReadFile(filepath.Join(dir, "t.jks"))

			_ = w.secrets.Delete(passwordSecret("good"))
			if tc.secret != nil {
				_ = w.secrets.Add(tc.secret)
			}
			_ = w.native.Update(ctb("one", "", nil, a, fixtures.CA("new")))
			res := s.sync()
			if err := res.Err(); err == nil || err.Error() != tc.wantErr {
				t.Fatalf("err = %v\nwant   %s", err, tc.wantErr)
			}
			if after, _ := os.ReadFile(filepath.Join(dir, "t.jks")); !bytes.Equal(after, before) {
				t.Error("the store lost its last good content")
			}
			if !strings.Contains(strings.Join(events.got, "\n"), "Warning TrustBundleSyncFailed: Keeping the last good trust files: "+tc.wantErr) {
				t.Errorf("no Event says why: %q", events.got)
			}
		})
	}
}
