package sidecar

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/sidecar/contract"
	"github.com/trustsync/trustsync/test/fixtures"
)

var (
	nativeCA = fixtures.CA("native anchor")
	mirrorCA = fixtures.CA("mirror anchor")
	cmCA     = fixtures.CA("configmap anchor")
	sharedCA = fixtures.CA("in both APIs")
)

// fakeEvents records what would become Events on the pod.
type fakeEvents struct{ got, keys []string }

func (f *fakeEvents) warning(reason, message string) {
	f.got = append(f.got, "Warning "+reason+": "+message)
}
func (f *fakeEvents) warningOnce(key, reason, message string) {
	f.got = append(f.got, "Warning "+reason+": "+message)
	f.keys = append(f.keys, key)
}
func (f *fakeEvents) normal(reason, message string) {
	f.got = append(f.got, "Normal "+reason+": "+message)
}

// world is the watched state a syncer renders: stores the tests fill by hand, as the
// informers would.
type world struct {
	native, mirror, configMaps, secrets cache.Store
}

func newWorld() *world {
	key := cache.DeletionHandlingMetaNamespaceKeyFunc
	return &world{native: cache.NewStore(key), mirror: cache.NewStore(key), configMaps: cache.NewStore(key), secrets: cache.NewStore(key)}
}

func ctb(name, signer string, labels map[string]string, anchors ...*fixtures.Cert) *certificatesv1.ClusterTrustBundle {
	return &certificatesv1.ClusterTrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: fixtures.Bundle(anchors...)},
	}
}

// newTestSyncer wires the sources list sourcesJSON to w's stores.
func newTestSyncer(t *testing.T, w *world, writer Writer, sourcesJSON string) (*syncer, *fakeEvents) {
	t.Helper()
	sources, err := contract.ParseSources([]byte(sourcesJSON))
	if err != nil {
		t.Fatal(err)
	}
	groups := groupByPath(sources)
	for gi := range groups {
		for ii := range groups[gi].items {
			it := &groups[gi].items[ii]
			switch src := it.source; {
			case src.ConfigMap != nil:
				it.from = &objectSource{kind: "ConfigMap", namespace: "apps", name: src.ConfigMap.Name, key: src.ConfigMap.Key, store: w.configMaps}
			case src.Secret != nil:
				it.from = &objectSource{kind: "Secret", namespace: "apps", name: src.Secret.Name, key: src.Secret.Key, store: w.secrets}
			case src.DefaultCAs:
				it.from = defaultCAsSource{}
			default:
				sel, _ := src.Selector()
				match, err := sel.Matcher()
				if err != nil {
					t.Fatal(err)
				}
				it.from = &bundleSource{selector: sel, match: match, stores: []cache.Store{w.native, w.mirror}}
			}
		}
		if ref := groups[gi].items[0].source.PasswordSecret; ref != nil {
			groups[gi].password = &passwordSource{path: groups[gi].path, namespace: "apps", name: ref.Name, key: ref.Key, store: w.secrets}
		}
	}
	events := &fakeEvents{}
	clk := clocktesting.NewFakeClock(time.Now())
	s, err := newSyncer(groups, writer, clk, &eventReporter{events: events, failing: failureEvents{clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	return s, events
}

// certsIn decodes a trust file's certificates.
func certsIn(t *testing.T, dir, path string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, path))
	if err != nil {
		t.Fatal(err)
	}
	certs, err := tsbundle.ParseCertificates(data)
	if err != nil {
		t.Fatal(err)
	}
	var cns []string
	for _, c := range certs {
		cns = append(cns, c.Subject.CommonName)
	}
	return cns
}

func TestSync_MergesEveryKindOfSourceIntoOnePath(t *testing.T) {
	w := newWorld()
	live := map[string]string{"kubernetes.io/cluster-trust-bundle-version": "live"}
	_ = w.native.Add(ctb("example.com:s:live", "example.com/s", live, nativeCA, sharedCA))
	_ = w.native.Add(ctb("example.com:s:old", "example.com/s", nil, fixtures.CA("not selected")))
	_ = w.mirror.Add(ctb("example.com:s:mirror", "example.com/s", live, mirrorCA, sharedCA))
	_ = w.configMaps.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "extra", Namespace: "apps"}, Data: map[string]string{"ca.crt": fixtures.Bundle(cmCA)}})
	dir := t.TempDir()
	s, _ := newTestSyncer(t, w, NewAtomicWriter(dir), `[
		{"signerName": "example.com/s", "labelSelector": {"matchLabels": {"kubernetes.io/cluster-trust-bundle-version": "live"}}, "path": "ca.pem"},
		{"configMap": {"name": "extra", "key": "ca.crt"}, "path": "ca.pem"},
		{"defaultCAs": true, "path": "ca.pem"}]`)

	if res := s.sync(); res.Err() != nil || !res.changed {
		t.Fatalf("sync: changed=%v err=%v", res.changed, res.Err())
	}
	got := certsIn(t, dir, "ca.pem")
	want := 4 + len(publicRoots()) // native, mirror, the shared one once, the ConfigMap's, the web roots
	if len(got) != want {
		t.Fatalf("ca.pem holds %d anchors, want %d", len(got), want)
	}
	for _, cn := range []string{"native anchor", "mirror anchor", "in both APIs", "configmap anchor"} {
		if n := strings.Count(strings.Join(got, "\n"), cn); n != 1 {
			t.Errorf("%q appears %d times, want once", cn, n)
		}
	}
	if strings.Contains(strings.Join(got, "\n"), "not selected") {
		t.Error("a bundle the selector does not match was merged")
	}
	if res := s.sync(); res.changed {
		t.Error("an unchanged world rewrote the file")
	}
}

// Every error keeps the file's last good content, and says why.
func TestSync_KeepsTheLastGoodFileOnEveryError(t *testing.T) {
	tests := []struct {
		name    string
		breakIt func(w *world)
		wantErr string
	}{
		{"the last matching bundle is deleted", func(w *world) { _ = w.native.Delete(ctb("corp", "", nil)) }, `ClusterTrustBundle "corp" not found`},
		{"the ConfigMap is deleted", func(w *world) {
			_ = w.configMaps.Delete(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "extra", Namespace: "apps"}})
		}, "ConfigMap apps/extra not found"},
		{"the ConfigMap loses its key", func(w *world) {
			_ = w.configMaps.Update(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "extra", Namespace: "apps"}, Data: map[string]string{"other": "x"}})
		}, `ConfigMap apps/extra has no key "ca.crt"`},
		{"the ConfigMap's value gains a private key", func(w *world) {
			_ = w.configMaps.Update(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "extra", Namespace: "apps"}, Data: map[string]string{"ca.crt": fixtures.Bundle(cmCA) + string(cmCA.KeyPEM())}})
		}, `PEM block 1 has type "PRIVATE KEY"; only CERTIFICATE blocks are allowed in trust sources, so the whole source was refused`},
		{"the ConfigMap's value is not PEM at all", func(w *world) {
			_ = w.configMaps.Update(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "extra", Namespace: "apps"}, Data: map[string]string{"ca.crt": "hello"}})
		}, `ConfigMap apps/extra key "ca.crt" holds no certificate`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			_ = w.native.Add(ctb("corp", "", nil, nativeCA))
			_ = w.configMaps.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "extra", Namespace: "apps"}, Data: map[string]string{"ca.crt": fixtures.Bundle(cmCA)}})
			dir := t.TempDir()
			s, events := newTestSyncer(t, w, NewAtomicWriter(dir), `[{"name": "corp", "path": "ca.pem"}, {"configMap": {"name": "extra", "key": "ca.crt"}, "path": "ca.pem"}, {"name": "corp", "path": "other.pem"}]`)
			if res := s.sync(); res.Err() != nil {
				t.Fatal(res.Err())
			}
			good, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))

			tc.breakIt(w)
			res := s.sync()
			if err := res.failed["ca.pem"]; err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ca.pem error = %v, want %q", err, tc.wantErr)
			}
			if now, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); !bytes.Equal(now, good) {
				t.Error("the last good ca.pem was changed")
			}
			if len(events.got) != 1 || !strings.HasPrefix(events.got[0], "Warning TrustBundleSyncFailed: Keeping the last good trust files: ca.pem: ") {
				t.Errorf("events = %q, want one TrustBundleSyncFailed", events.got)
			}
			s.sync()
			if len(events.got) != 1 {
				t.Errorf("an unchanged failure recorded another Event: %q", events.got)
			}
		})
	}
}

func TestSync_RecoveryIsReported(t *testing.T) {
	w := newWorld()
	dir := t.TempDir()
	s, events := newTestSyncer(t, w, NewAtomicWriter(dir), `[{"name": "corp", "path": "ca.pem"}]`)
	if res := s.sync(); !strings.Contains(res.Err().Error(), `ca.pem: ClusterTrustBundle "corp" not found`) {
		t.Fatalf("err = %v", res.Err())
	}
	if _, err := os.Stat(filepath.Join(dir, "ca.pem")); !os.IsNotExist(err) {
		t.Error("a required file was written with nothing to put in it")
	}
	_ = w.native.Add(ctb("corp", "", nil, nativeCA))
	if res := s.sync(); res.Err() != nil || !res.changed {
		t.Fatalf("after the bundle appeared: %+v", res)
	}
	if len(events.got) != 2 || events.got[1] != "Normal TrustBundleSyncRecovered: Trust files are current again" {
		t.Errorf("events = %q", events.got)
	}
}

// Removing trust must propagate: an optional path whose sources all match nothing
// becomes an empty file, not a stale one.
func TestSync_OptionalPathWithNothingBecomesEmpty(t *testing.T) {
	w := newWorld()
	_ = w.native.Add(ctb("corp", "", nil, nativeCA))
	dir := t.TempDir()
	s, _ := newTestSyncer(t, w, NewAtomicWriter(dir), `[{"name": "corp", "path": "ca.pem", "optional": true}, {"configMap": {"name": "absent", "key": "k"}, "path": "ca.pem", "optional": true}]`)
	s.sync()
	if got := certsIn(t, dir, "ca.pem"); len(got) != 1 {
		t.Fatalf("ca.pem = %q", got)
	}
	_ = w.native.Delete(ctb("corp", "", nil))
	if res := s.sync(); res.Err() != nil {
		t.Fatal(res.Err())
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); len(data) != 0 {
		t.Errorf("ca.pem = %q, want empty", data)
	}
}

func TestSync_SecretRules(t *testing.T) {
	tests := []struct {
		name       string
		secretType corev1.SecretType
		data       string
		wantErr    string
	}{
		{"an Opaque Secret is read", corev1.SecretTypeOpaque, fixtures.Bundle(cmCA), ""},
		{"a TLS Secret's CA is read", corev1.SecretTypeTLS, fixtures.Bundle(cmCA), ""},
		{"another type is refused", corev1.SecretTypeDockerConfigJson, fixtures.Bundle(cmCA), `type "kubernetes.io/dockerconfigjson" of Secret apps/partner may not hold trust anchors; only Opaque and kubernetes.io/tls Secrets may`},
		{"a TLS Secret's key never reaches the file", corev1.SecretTypeTLS, string(cmCA.KeyPEM()), `Secret apps/partner key "tls.crt": PEM block 0 has type "PRIVATE KEY"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			_ = w.secrets.Add(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "partner", Namespace: "apps"}, Type: tc.secretType, Data: map[string][]byte{"tls.crt": []byte(tc.data)}})
			dir := t.TempDir()
			s, _ := newTestSyncer(t, w, NewAtomicWriter(dir), `[{"secret": {"name": "partner", "key": "tls.crt"}, "path": "partner.pem"}]`)
			res := s.sync()
			if tc.wantErr == "" {
				if res.Err() != nil {
					t.Fatal(res.Err())
				}
				return
			}
			if res.Err() == nil || !strings.Contains(res.Err().Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", res.Err(), tc.wantErr)
			}
			if _, err := os.Stat(filepath.Join(dir, "partner.pem")); !os.IsNotExist(err) {
				t.Error("a refused Secret produced a file")
			}
		})
	}
}

// failingWriter fails every write, as a full volume would.
type failingWriter struct{ Writer }

func (failingWriter) Write(map[string]File) (bool, error) {
	return false, errors.New("no space left on device")
}

func TestSync_AWriteFailureChangesNothingAndIsReported(t *testing.T) {
	w := newWorld()
	_ = w.native.Add(ctb("corp", "", nil, nativeCA))
	dir := t.TempDir()
	real := NewAtomicWriter(dir)
	s, events := newTestSyncer(t, w, failingWriter{real}, `[{"name": "corp", "path": "ca.pem"}]`)
	res := s.sync()
	if res.Err() == nil || !strings.Contains(res.Err().Error(), "cannot write: no space left on device") {
		t.Fatalf("err = %v", res.Err())
	}
	if len(events.got) != 1 {
		t.Errorf("events = %q", events.got)
	}
}

func TestSync_RestartKeepsThePreviousFilesAsLastGood(t *testing.T) {
	dir := t.TempDir()
	w := newWorld()
	_ = w.native.Add(ctb("corp", "", nil, nativeCA))
	first, _ := newTestSyncer(t, w, NewAtomicWriter(dir), `[{"name": "corp", "path": "ca.pem"}]`)
	first.sync()

	// A restarted sidecar whose bundle is gone keeps what the previous run wrote.
	restarted, _ := newTestSyncer(t, newWorld(), NewAtomicWriter(dir), `[{"name": "corp", "path": "ca.pem"}]`)
	if res := restarted.sync(); res.Err() == nil {
		t.Fatal("expected the missing bundle to be reported")
	}
	if got := certsIn(t, dir, "ca.pem"); len(got) != 1 || got[0] != "native anchor" {
		t.Errorf("ca.pem after restart = %q", got)
	}
}
