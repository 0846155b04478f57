package render

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/truststore"
	"github.com/trustsync/trustsync/test/fixtures"
)

var (
	nativeCA = fixtures.CA("native anchor")
	mirrorCA = fixtures.CA("mirror anchor")
	cmCA     = fixtures.CA("configmap anchor")
	sharedCA = fixtures.CA("in both APIs")
)

// world is what a pod's sources hold, as the tests set it; every bundle is offered to
// every selection, so the tests also show that render matches.
type world struct {
	bundles    map[string]*certificatesv1.ClusterTrustBundle // by uid
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
	cert       map[string]File
}

func newWorld() *world {
	return &world{bundles: map[string]*certificatesv1.ClusterTrustBundle{}, configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
}

// put adds or replaces a bundle; its uid says which API's object it is.
func (w *world) put(b *certificatesv1.ClusterTrustBundle) { w.bundles[string(b.UID)+"/"+b.Name] = b }

func (w *world) snapshot(p *Plan) Snapshot {
	s := Snapshot{Bundles: map[string][]*certificatesv1.ClusterTrustBundle{}, ConfigMaps: w.configMaps, Secrets: w.secrets, Certificate: w.cert}
	for _, sel := range p.Selectors() {
		for _, b := range w.bundles {
			s.Bundles[sel.Key] = append(s.Bundles[sel.Key], b)
		}
	}
	return s
}

func ctb(name, signer string, labels map[string]string, anchors ...*fixtures.Cert) *certificatesv1.ClusterTrustBundle {
	return &certificatesv1.ClusterTrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, UID: "native"},
		Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: fixtures.Bundle(anchors...)},
	}
}

func configMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps"}, Data: data}
}

func passwordSecret(password string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "store-pass", Namespace: "apps"}, Data: map[string][]byte{"password": []byte(password)}}
}

// pod renders one plan over a world, each rendering taken as written.
type pod struct {
	t    *testing.T
	plan *Plan
	w    *world
	last *Rendering
}

func newPod(t *testing.T, w *world, sourcesJSON string) *pod {
	t.Helper()
	sources, err := v1alpha1.ParseSources([]byte(sourcesJSON))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := NewPlan(sources, "apps", w.cert != nil)
	if err != nil {
		t.Fatal(err)
	}
	return &pod{t: t, plan: plan, w: w}
}

// render renders and takes the result as written.
func (p *pod) render() *Rendering {
	p.last = Render(p.plan, p.w.snapshot(p.plan), p.last)
	return p.last
}

// restart is the pod's pipeline started again over the files r left on disk.
func (p *pod) restart(r *Rendering) *pod {
	files := map[string]File{}
	for name, f := range r.Files {
		files[name] = f
	}
	return &pod{t: p.t, plan: p.plan, w: p.w, last: FromDisk(p.plan, files, p.w.snapshot(p.plan))}
}

// names is the subjects of a PEM file's certificates.
func names(t *testing.T, r *Rendering, path string) []string {
	t.Helper()
	certs, err := tsbundle.ParseCertificates(r.Files[path].Data)
	if err != nil {
		t.Fatal(err)
	}
	var cns []string
	for _, c := range certs {
		cns = append(cns, c.Subject.CommonName)
	}
	return cns
}

func TestRender_MergesEveryKindOfSourceIntoOnePathOnceEach(t *testing.T) {
	w := newWorld()
	live := map[string]string{"kubernetes.io/cluster-trust-bundle-version": "live"}
	w.put(ctb("example.com:s:live", "example.com/s", live, nativeCA, sharedCA))
	w.put(ctb("example.com:s:old", "example.com/s", nil, fixtures.CA("not selected")))
	mirror := ctb("example.com:s:mirror", "example.com/s", live, mirrorCA, sharedCA)
	mirror.UID = "mirror"
	w.put(mirror)
	w.configMaps["extra"] = configMap("extra", map[string]string{"ca.crt": fixtures.Bundle(cmCA)})
	p := newPod(t, w, `[
		{"signerName": "example.com/s", "labelSelector": {"matchLabels": {"kubernetes.io/cluster-trust-bundle-version": "live"}}, "path": "ca.pem"},
		{"configMap": {"name": "extra", "key": "ca.crt"}, "path": "ca.pem"},
		{"defaultCAs": true, "path": "ca.pem"}]`)

	r := p.render()
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(names(t, r, "ca.pem"), "\n")
	if n := len(names(t, r, "ca.pem")); n != 4+len(publicRoots()) {
		t.Fatalf("ca.pem holds %d anchors, want the native, mirror, shared and ConfigMap ones and the web roots", n)
	}
	for _, cn := range []string{"native anchor", "mirror anchor", "in both APIs", "configmap anchor"} {
		if n := strings.Count(got, cn); n != 1 {
			t.Errorf("%q appears %d times, want once", cn, n)
		}
	}
	if strings.Contains(got, "not selected") {
		t.Error("a bundle the selector does not match was merged")
	}
	if again := p.render(); !bytes.Equal(again.Files["ca.pem"].Data, r.Files["ca.pem"].Data) {
		t.Error("an unchanged world rendered other bytes")
	}
	if r.Files["ca.pem"].Mode != TrustFileMode {
		t.Errorf("mode %o, want %o: anchors are public", r.Files["ca.pem"].Mode, TrustFileMode)
	}
}

// Every error keeps the file's last good content, and says why.
func TestRender_KeepsTheLastGoodFileOnEveryError(t *testing.T) {
	tests := []struct {
		name    string
		breakIt func(w *world)
		wantErr string
	}{
		{"the last matching bundle is deleted", func(w *world) { delete(w.bundles, "native/corp") }, `ClusterTrustBundle "corp" not found`},
		{"the ConfigMap is deleted", func(w *world) { delete(w.configMaps, "extra") }, "ConfigMap apps/extra not found"},
		{"the ConfigMap loses its key", func(w *world) { w.configMaps["extra"] = configMap("extra", map[string]string{"other": "x"}) }, `ConfigMap apps/extra has no key "ca.crt"`},
		{"the ConfigMap's value gains a private key", func(w *world) {
			w.configMaps["extra"] = configMap("extra", map[string]string{"ca.crt": fixtures.Bundle(cmCA) + string(cmCA.KeyPEM())})
		}, `PEM block 1 has type "PRIVATE KEY"; only CERTIFICATE blocks are allowed in trust sources, so the whole source was refused`},
		{"the ConfigMap's value is not PEM at all", func(w *world) { w.configMaps["extra"] = configMap("extra", map[string]string{"ca.crt": "hello"}) },
			`ConfigMap apps/extra key "ca.crt" holds no certificate`},
		{"a bundle's PEM is broken", func(w *world) {
			broken := ctb("corp", "", nil, nativeCA)
			broken.Spec.TrustBundle += "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
			w.put(broken)
		}, `ClusterTrustBundle "corp": `},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			w.put(ctb("corp", "", nil, nativeCA))
			w.configMaps["extra"] = configMap("extra", map[string]string{"ca.crt": fixtures.Bundle(cmCA)})
			p := newPod(t, w, `[{"name": "corp", "path": "ca.pem"}, {"configMap": {"name": "extra", "key": "ca.crt"}, "path": "ca.pem"}, {"name": "corp", "path": "other.pem"}]`)
			good := p.render()
			if err := good.Err(); err != nil {
				t.Fatal(err)
			}
			goodState, _ := good.State()

			tc.breakIt(w)
			w.put(ctb("new", "", nil, fixtures.CA("not yet")))
			r := p.render()
			if err := r.Failed["ca.pem"]; err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ca.pem error = %v, want %q", err, tc.wantErr)
			}
			if !bytes.Equal(r.Files["ca.pem"].Data, good.Files["ca.pem"].Data) {
				t.Error("the last good ca.pem was changed")
			}
			if now, _ := r.State(); now != goodState {
				t.Error("a held-back path changed what the app is said to hold")
			}
			if !strings.HasPrefix(r.Err().Error(), "ca.pem: ") {
				t.Errorf("Err() = %v, want the path named first", r.Err())
			}
		})
	}
}

// A required path that never had content is not written at all, rather than empty.
func TestRender_ARequiredPathWithNothingIsNotWritten(t *testing.T) {
	p := newPod(t, newWorld(), `[{"name": "corp", "path": "ca.pem"}]`)
	r := p.render()
	if err := r.Err(); err == nil || err.Error() != `ca.pem: ClusterTrustBundle "corp" not found` {
		t.Fatalf("err = %v", err)
	}
	if _, ok := r.Files["ca.pem"]; ok {
		t.Error("a required file was rendered with nothing to put in it")
	}
	if _, complete := r.State(); complete {
		t.Error("the state is complete without its required file")
	}
	p.w.put(ctb("corp", "", nil, nativeCA))
	if r := p.render(); r.Err() != nil || len(names(t, r, "ca.pem")) != 1 {
		t.Fatalf("after the bundle appeared: %v", r.Err())
	}
}

// Removing trust must propagate: an optional path whose sources all match nothing
// becomes an empty file, not a stale one.
func TestRender_OptionalPathWithNothingBecomesEmpty(t *testing.T) {
	w := newWorld()
	w.put(ctb("corp", "", nil, nativeCA))
	p := newPod(t, w, `[{"name": "corp", "path": "ca.pem", "optional": true}, {"configMap": {"name": "absent", "key": "k"}, "path": "ca.pem", "optional": true}]`)
	if got := names(t, p.render(), "ca.pem"); len(got) != 1 {
		t.Fatalf("ca.pem = %q", got)
	}
	delete(w.bundles, "native/corp")
	r := p.render()
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	if f, ok := r.Files["ca.pem"]; !ok || len(f.Data) != 0 {
		t.Errorf("ca.pem = %q (present %v), want empty", f.Data, ok)
	}
	if fresh, ok := r.Fresh()["ca.pem"]; !ok || len(fresh.Anchors) != 0 || !fresh.FirstExpiry.IsZero() {
		t.Errorf("fresh ca.pem %+v (present %v), want rendered with no anchor", fresh, ok)
	}
}

func TestRender_SecretRules(t *testing.T) {
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
			w.secrets["partner"] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "partner", Namespace: "apps"}, Type: tc.secretType, Data: map[string][]byte{"tls.crt": []byte(tc.data)}}
			r := newPod(t, w, `[{"secret": {"name": "partner", "key": "tls.crt"}, "path": "partner.pem"}]`).render()
			if tc.wantErr == "" {
				if r.Err() != nil || len(names(t, r, "partner.pem")) != 1 {
					t.Fatalf("err = %v", r.Err())
				}
				return
			}
			if r.Err() == nil || !strings.Contains(r.Err().Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", r.Err(), tc.wantErr)
			}
			if _, ok := r.Files["partner.pem"]; ok {
				t.Error("a refused Secret produced a file")
			}
		})
	}
}

func openStore(t *testing.T, r *Rendering, path, format, password string) [][]byte {
	t.Helper()
	data := r.Files[path].Data
	var ders [][]byte
	var err error
	if format == v1alpha1.FormatJKS {
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

func TestRender_TruststoresHoldTheMergedAnchors(t *testing.T) {
	for _, format := range []string{v1alpha1.FormatPKCS12, v1alpha1.FormatJKS} {
		t.Run(format, func(t *testing.T) {
			w := newWorld()
			a, b := fixtures.CA("a"), fixtures.CA("b")
			w.put(ctb("one", "", nil, a))
			w.put(ctb("two", "", nil, b, a))
			w.secrets["store-pass"] = passwordSecret("s3cret-from-a-Secret")
			r := newPod(t, w, `[
				{"name": "one", "path": "default.store", "format": "`+format+`"},
				{"name": "two", "path": "default.store", "format": "`+format+`"},
				{"name": "two", "path": "secret.store", "format": "`+format+`", "passwordSecret": {"name": "store-pass", "key": "password"}},
				{"name": "one", "path": "ca.pem"}]`).render()
			if r.Err() != nil {
				t.Fatal(r.Err())
			}
			if got := openStore(t, r, "default.store", format, v1alpha1.DefaultStorePassword); !holds(got, a, b) {
				t.Errorf("default.store holds %d certificates, want a and b once each", len(got))
			}
			if got := openStore(t, r, "secret.store", format, "s3cret-from-a-Secret"); !holds(got, a, b) {
				t.Errorf("secret.store holds %d certificates, want a and b", len(got))
			}
			if got := names(t, r, "ca.pem"); len(got) != 1 {
				t.Errorf("the PEM file beside the stores holds %v", got)
			}
		})
	}
}

// A pkcs12 file is written with the profile its sources name: PBMAC1 for Modern2026,
// PKCS#12's own MAC for Modern2023, the default outside FIPS mode.
func TestRender_APKCS12StoreIsWrittenWithItsProfile(t *testing.T) {
	w := newWorld()
	a := fixtures.CA("a")
	w.put(ctb("one", "", nil, a))
	r := newPod(t, w, `[
		{"name": "one", "path": "default.p12", "format": "pkcs12"},
		{"name": "one", "path": "2026.p12", "format": "pkcs12", "pkcs12Profile": "Modern2026"}]`).render()
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	pbmac1 := []byte{0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x05, 0x0e} // OID 1.2.840.113549.1.5.14
	for file, want := range map[string]bool{"default.p12": false, "2026.p12": true} {
		if got := bytes.Contains(r.Files[file].Data, pbmac1); got != want {
			t.Errorf("%s: PBMAC1 present = %v, want %v", file, got, want)
		}
		if got := openStore(t, r, file, v1alpha1.FormatPKCS12, v1alpha1.DefaultStorePassword); !holds(got, a) {
			t.Errorf("%s holds %d certificates, want a", file, len(got))
		}
	}
}

// A PKCS#12 store is salted anew at each encoding, so encoding it at every render
// would change the file (and wake whatever watches it) for nothing; the same holds
// after a restart, which reads the store on disk back.
func TestRender_AStoreIsEncodedAgainOnlyWhenItsSetOrPasswordChanges(t *testing.T) {
	w := newWorld()
	a, b, c := fixtures.CA("a"), fixtures.CA("b"), fixtures.CA("c")
	w.put(ctb("one", "", nil, a, b))
	w.secrets["store-pass"] = passwordSecret("first")
	p := newPod(t, w, `[{"name": "one", "path": "t.p12", "format": "pkcs12", "passwordSecret": {"name": "store-pass", "key": "password"}}]`)
	first := p.render().Files["t.p12"].Data

	steps := []struct {
		name     string
		change   func()
		restart  bool
		newBytes bool
		holds    []*fixtures.Cert
		password string
	}{
		{"the same set in another order with a duplicate", func() { w.put(ctb("one", "", nil, b, a, b)) }, false, false, []*fixtures.Cert{a, b}, "first"},
		{"a restart over the files on disk", func() {}, true, false, []*fixtures.Cert{a, b}, "first"},
		{"a new anchor", func() { w.put(ctb("one", "", nil, a, b, c)) }, false, true, []*fixtures.Cert{a, b, c}, "first"},
		{"a new password", func() { w.secrets["store-pass"] = passwordSecret("second") }, false, true, []*fixtures.Cert{a, b, c}, "second"},
	}
	last := first
	for _, st := range steps {
		st.change()
		if st.restart {
			p = p.restart(p.last)
		}
		r := p.render()
		if got := !bytes.Equal(r.Files["t.p12"].Data, last); got != st.newBytes {
			t.Fatalf("%s: new bytes = %v, want %v", st.name, got, st.newBytes)
		}
		if !holds(openStore(t, r, "t.p12", v1alpha1.FormatPKCS12, st.password), st.holds...) {
			t.Fatalf("%s: the store does not hold the anchors", st.name)
		}
		last = r.Files["t.p12"].Data
	}
}

func TestRender_ABadPasswordSecretHoldsTheStoreAtItsLastGoodContent(t *testing.T) {
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
			w.put(ctb("one", "", nil, a))
			w.secrets["store-pass"] = passwordSecret("good")
			p := newPod(t, w, `[{"name": "one", "path": "t.jks", "format": "jks", "passwordSecret": {"name": "store-pass", "key": "password"}}]`)
			before := p.render().Files["t.jks"].Data

			delete(w.secrets, "store-pass")
			if tc.secret != nil {
				w.secrets["store-pass"] = tc.secret
			}
			w.put(ctb("one", "", nil, a, fixtures.CA("new")))
			r := p.render()
			if err := r.Err(); err == nil || err.Error() != tc.wantErr {
				t.Fatalf("err = %v\nwant   %s", err, tc.wantErr)
			}
			if !bytes.Equal(r.Files["t.jks"].Data, before) {
				t.Error("the store lost its last good content")
			}
		})
	}
}

// A restarted pipeline whose source is gone keeps what the previous run wrote.
func TestRender_RestartKeepsThePreviousFilesAsLastGood(t *testing.T) {
	w := newWorld()
	w.put(ctb("corp", "", nil, nativeCA))
	p := newPod(t, w, `[{"name": "corp", "path": "ca.pem"}, {"name": "corp", "path": "t.jks", "format": "jks", "passwordSecret": {"name": "gone", "key": "p"}}]`)
	p.render()
	delete(w.bundles, "native/corp")
	restarted := p.restart(p.last)
	r := restarted.render()
	if r.Err() == nil {
		t.Fatal("expected the missing bundle to be reported")
	}
	if got := names(t, r, "ca.pem"); len(got) != 1 || got[0] != "native anchor" {
		t.Errorf("ca.pem after restart = %q", got)
	}
}

// The app's state, for a reload, is the set of anchors of each file and the workload
// certificate: never new bytes alone; and it is complete once every file the app waits
// for is there.
func TestRendering_StateChangesWithTheSetNotTheBytes(t *testing.T) {
	w := newWorld()
	a, b, c := fixtures.CA("a"), fixtures.CA("b"), fixtures.CA("c")
	w.put(ctb("one", "", nil, a, b))
	w.secrets["store-pass"] = passwordSecret("first")
	w.cert = map[string]File{}
	p := newPod(t, w, `[{"name": "one", "path": "ca.pem"}, {"name": "one", "path": "t.p12", "format": "pkcs12", "passwordSecret": {"name": "store-pass", "key": "password"}},
		{"name": "extra", "path": "extra.pem", "optional": true}]`)
	w.cert = nil
	prev, _ := p.render().State()
	steps := []struct {
		name     string
		change   func()
		changed  bool
		complete bool
	}{
		{"before the certificate: the app waits", func() {}, false, false},
		{"the first certificate", func() { w.cert = certFiles("cert-1") }, true, true},
		{"a resync with nothing new", func() {}, false, true},
		{"the same anchors in another order, with a duplicate", func() { w.put(ctb("one", "", nil, b, a, b)) }, false, true},
		{"a new password: the store is encoded again, its set is the same", func() { w.secrets["store-pass"] = passwordSecret("second") }, false, true},
		{"a new anchor", func() { w.put(ctb("one", "", nil, a, b, c)) }, true, true},
		{"an anchor removed", func() { w.put(ctb("one", "", nil, a, c)) }, true, true},
		{"a broken source holds its files back", func() {
			broken := ctb("one", "", nil, a)
			broken.Spec.TrustBundle += "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
			w.put(broken)
		}, false, true},
		{"the source mended with the set it had", func() { w.put(ctb("one", "", nil, c, a)) }, false, true},
		{"an optional file appears", func() { w.put(ctb("extra", "", nil, b)) }, true, true},
		{"a renewed certificate", func() { w.cert = certFiles("cert-2") }, true, true},
	}
	for _, st := range steps {
		st.change()
		state, complete := p.render().State()
		if got := state != prev; got != st.changed || complete != st.complete {
			t.Fatalf("%s: changed %v complete %v, want %v %v", st.name, got, complete, st.changed, st.complete)
		}
		prev = state
	}
	t.Run("files found on disk are the state a restarted pipeline starts from", func(t *testing.T) {
		fromDisk := p.restart(p.last)
		if s, _ := fromDisk.last.State(); s != prev {
			t.Errorf("state from disk %q, want %q", s, prev)
		}
	})
}

func certFiles(crt string) map[string]File {
	return map[string]File{v1alpha1.FileCertificate: {Data: []byte(crt), Mode: 0o644}, v1alpha1.FileKey: {Data: []byte("key of " + crt), Mode: 0o600}}
}

func TestPlan_ItemsReadingTheSameObjectShareOneSource(t *testing.T) {
	sources, err := v1alpha1.ParseSources([]byte(`[
		{"name": "corp", "path": "ca.pem"},
		{"name": "corp", "path": "t.p12", "format": "pkcs12", "passwordSecret": {"name": "s", "key": "password"}},
		{"name": "corp", "path": "t.jks", "format": "jks", "passwordSecret": {"name": "s", "key": "password"}},
		{"signerName": "example.com/a", "labelSelector": {"matchLabels": {"v": "live"}}, "path": "ca.pem"},
		{"signerName": "example.com/a", "labelSelector": {"matchLabels": {"v": "live"}}, "path": "t.p12", "format": "pkcs12", "passwordSecret": {"name": "s", "key": "password"}},
		{"signerName": "example.com/a", "labelSelector": {}, "path": "all.pem"},
		{"secret": {"name": "s", "key": "ca.crt"}, "path": "ca.pem"},
		{"configMap": {"name": "s", "key": "ca.crt"}, "path": "ca.pem"},
		{"defaultCAs": true, "path": "web.pem", "optional": true}]`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(sources, "apps", true)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Selectors()); n != 3 {
		t.Errorf("%d bundle selections, want 3: corp, the live selector, and the all selector", n)
	}
	if got := p.Secrets(); !slices.Equal(got, []string{"s"}) {
		t.Errorf("Secrets() = %q, want s once: a source and a password", got)
	}
	if got := p.ConfigMaps(); !slices.Equal(got, []string{"s"}) {
		t.Errorf("ConfigMaps() = %q", got)
	}
	if got, want := p.Required(), []string{v1alpha1.FileCertificate, v1alpha1.FileKey, "ca.pem", "t.p12", "t.jks", "all.pem"}; !slices.Equal(got, want) {
		t.Errorf("Required() = %q, want %q", got, want)
	}
}

// Paths holding the same anchors share one PEM encoding, within a rendering and
// across renderings of other plans: many keys (or objects) of the public roots cost
// one copy, not one each. A path holding other anchors has its own.
func TestRender_PathsHoldingTheSameSetShareOneEncoding(t *testing.T) {
	w := newWorld()
	w.configMaps["extra"] = configMap("extra", map[string]string{"ca.crt": fixtures.Bundle(fixtures.CA("shared test"))})
	one := newPod(t, w, `[{"defaultCAs": true, "path": "a.pem"}, {"defaultCAs": true, "path": "b.pem"},
		{"defaultCAs": true, "path": "c.pem"}, {"configMap": {"name": "extra", "key": "ca.crt"}, "path": "c.pem"}]`).render()
	other := newPod(t, w, `[{"defaultCAs": true, "path": "web/roots.pem"}]`).render()
	if err := errors.Join(one.Err(), other.Err()); err != nil {
		t.Fatal(err)
	}
	same := func(a, b []byte) bool { return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0] }
	if !same(one.Paths["a.pem"].Content, one.Paths["b.pem"].Content) {
		t.Error("two keys of the public roots in one rendering hold two copies")
	}
	if !same(one.Paths["a.pem"].Content, other.Paths["web/roots.pem"].Content) {
		t.Error("the public roots in two plans' renderings are two copies")
	}
	if same(one.Paths["a.pem"].Content, one.Paths["c.pem"].Content) {
		t.Error("a path holding more anchors shares the others' encoding")
	}
}

// What a rendering's content holds is named once per anchor, across its paths; what
// was found on disk and not read back names nothing, so a reader waiting for an
// anchor in it keeps waiting.
func TestRendering_AnchorIDsAreWhatItsPathsHoldOnceEach(t *testing.T) {
	w := newWorld()
	w.configMaps["a"] = configMap("a", map[string]string{"ca.crt": fixtures.Bundle(cmCA, sharedCA)})
	w.configMaps["b"] = configMap("b", map[string]string{"ca.crt": fixtures.Bundle(sharedCA)})
	p := newPod(t, w, `[{"configMap": {"name": "a", "key": "ca.crt"}, "path": "a.pem"}, {"configMap": {"name": "b", "key": "ca.crt"}, "path": "b.pem"}]`)
	r := p.render()
	want := []string{tsbundle.AnchorID(cmCA.Cert.Raw), tsbundle.AnchorID(sharedCA.Cert.Raw)}
	slices.Sort(want)
	if got := r.AnchorIDs(); !slices.Equal(got, want) {
		t.Errorf("anchor IDs %v, want %v", got, want)
	}
	if got := p.restart(r).last.AnchorIDs(); len(got) != 0 {
		t.Errorf("a rendering found on disk names %v, want nothing", got)
	}
}
