package sidecar

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/trustsync/trustsync/bundle/truststore"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/test/fixtures"
)

// A truststore whose password Secret is missing is not written, and an Event names
// the Secret and key to create; once it exists the store is written and follows the
// bundle and the password. The app's reload URL hears of each change of the set of
// anchors, and of nothing else: not the first write, not a store re-encoded under a
// new password.
func TestSidecar_TruststoreWaitsForItsPasswordAndReloadsOnlyOnANewSet(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	primary, _ := stores(t, cp, true)
	a, b := fixtures.CA("store a"), fixtures.CA("store b")
	name := uniq(t, "store")
	if _, err := primary.Create(ctx, ctb(name, "", nil, a), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var posts atomic.Int32
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/-/reload" {
			posts.Add(1)
		}
	}))
	defer app.Close()
	secrets := kube(t, cp).CoreV1().Secrets(namespace)
	t.Cleanup(func() { _ = secrets.Delete(ctx, "store-pass", metav1.DeleteOptions{}) })

	pod := podFor(t, cp, name)
	s := runSidecar(t, cp, "run", pod, `[{"name": "`+name+`", "path": "ca.pem"},
		{"name": "`+name+`", "path": "t.p12", "format": "pkcs12", "passwordSecret": {"name": "store-pass", "key": "password"}}]`,
		contract.Flag(contract.FlagReloadURL, app.URL+"/-/reload"))

	s.WaitFor(t, "ca.pem", merged(a))
	waitForEvent(t, cp, pod, "TrustBundleSyncFailed", `t.p12: passwordSecret apps/store-pass (the password of t.p12) not found; create the Secret with the key "password"`)
	if _, err := s.Read("t.p12"); err == nil {
		t.Fatal("the store was written without its password")
	}

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "store-pass"}, Data: map[string][]byte{"password": []byte("first")}}
	if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	holds := func(password string, want ...*fixtures.Cert) func([]byte) bool {
		return func(data []byte) bool {
			ders, err := truststore.DecodePKCS12(data, password)
			if err != nil || len(ders) != len(want) {
				return false
			}
			for _, c := range want {
				if !bytes.Contains(bytes.Join(ders, nil), c.Cert.Raw) {
					return false
				}
			}
			return true
		}
	}
	// The sidecar's log says what it decided, in order: the reloader decides about a
	// write before the reporter logs "Wrote trust files" for it. So once a write is
	// logged, whether it asked for a reload is known: no sleep is needed to see that
	// none came.
	logged := func(line string) int {
		data, _ := os.ReadFile(s.Process.LogPath)
		return strings.Count(string(data), line)
	}
	const wrote, decided = "Wrote trust files", "What the app trusts or presents changed; it will be told"
	waitLogged := func(what, line string, atLeast int) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return logged(line) >= atLeast, nil
		}); err != nil {
			t.Fatalf("the sidecar never logged %s (%q): %v", what, line, err)
		}
	}
	s.WaitUntil(t, "t.p12", holds("first", a), "the store, under the Secret's password")
	waitLogged("the app's baseline", "The app starts with the files as they are", 1)
	if n := logged(decided); n != 0 {
		t.Fatalf("%d reloads decided before any change of the set (the first writes)", n)
	}

	writes := logged(wrote)
	secret.Data["password"] = []byte("second")
	if _, err := secrets.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.WaitUntil(t, "t.p12", holds("second", a), "the store re-encoded under the new password")
	waitLogged("the re-encoded store's write", wrote, writes+1)
	if n := logged(decided); n != 0 {
		t.Fatalf("%d reloads decided for a store re-encoded with the same set", n)
	}

	got, err := primary.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.TrustBundle = fixtures.Bundle(a, b)
	if _, err := primary.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.WaitUntil(t, "t.p12", holds("second", a, b), "the new anchor in the store")
	s.WaitFor(t, "ca.pem", merged(a, b))
	waitLogged("the reload told", "Told the app that its trust or certificate changed", 1)
	if n, d := posts.Load(), logged(decided); n != 1 || d != 1 {
		t.Fatalf("%d reloads heard (%d decided) for one change of the set, want 1", n, d)
	}
	waitForEvent(t, cp, pod, "TrustReloaded", "POST "+app.URL+"/-/reload answered 200 OK")
}
