package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/certificate"
	"github.com/trustsync/trustsync/delivery/observe"
	"github.com/trustsync/trustsync/delivery/render"
	"github.com/trustsync/trustsync/delivery/watch"
	"github.com/trustsync/trustsync/delivery/write"
	"github.com/trustsync/trustsync/test/fixtures"
)

// sources is what the tests make the watches hold.
type sources struct {
	bundles []*certificatesv1.ClusterTrustBundle
	changed chan struct{}
}

func (s *sources) Changed() <-chan struct{} { return s.changed }
func (s *sources) Bundles(string) []*certificatesv1.ClusterTrustBundle {
	return s.bundles
}
func (s *sources) ConfigMap(string) (*corev1.ConfigMap, bool) { return nil, false }
func (s *sources) Secret(string) (*corev1.Secret, bool)       { return nil, false }

func (s *sources) set(anchors ...*fixtures.Cert) {
	s.bundles = []*certificatesv1.ClusterTrustBundle{{ObjectMeta: metav1.ObjectMeta{Name: "corp"},
		Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: fixtures.Bundle(anchors...)}}}
}

// told keeps what the observers were told.
type told struct {
	mu  sync.Mutex
	got []observe.Written
}

func (t *told) Wrote(w observe.Written) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.got = append(t.got, w)
}

// snapshot is what was told so far, for a test reading while Run writes.
func (t *told) snapshot() []observe.Written {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.got)
}

// failingWriter fails every write while err is set, as a full volume would.
type failingWriter struct {
	write.Writer
	err error
}

func (f *failingWriter) Write(payload map[string]render.File) (bool, error) {
	if f.err != nil {
		return false, f.err
	}
	return f.Writer.Write(payload)
}

func newPipeline(t *testing.T, dir string, src *sources, certificate bool, observers ...observe.Observer) (*Pipeline, *failingWriter) {
	t.Helper()
	sourcesList, err := v1alpha1.ParseSources([]byte(`[{"name": "corp", "path": "ca.pem"}]`))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := render.NewPlan(sourcesList, "apps", certificate)
	if err != nil {
		t.Fatal(err)
	}
	w := &failingWriter{Writer: write.NewAtomicWriter(dir)}
	onDisk, err := w.Read()
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{Plan: plan, Sources: src, Writer: w, OnDisk: onDisk, Observers: observers}), w
}

func read(t *testing.T, dir, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// A write that fails reaches nothing: every path is reported as not written, the
// observers are told the app still holds the last written state, and the next sync
// writes.
func TestSync_AWriteFailureChangesNothingAndIsReported(t *testing.T) {
	dir := t.TempDir()
	src := &sources{changed: make(chan struct{}, 1)}
	src.set(fixtures.CA("a"))
	o := &told{}
	p, w := newPipeline(t, dir, src, false, o)
	p.Sync()
	before := read(t, dir, "ca.pem")
	beforeState, _ := o.got[len(o.got)-1].Now.State()

	src.set(fixtures.CA("a"), fixtures.CA("b"))
	w.err = errors.New("no space left on device")
	got := p.Sync()
	if err := got.Err(); err == nil || err.Error() != "ca.pem: cannot write: no space left on device" {
		t.Fatalf("Err() = %v", err)
	}
	if state, _ := got.Now.State(); state != beforeState {
		t.Error("a failed write told the observers the app holds the new state")
	}
	if read(t, dir, "ca.pem") != before {
		t.Error("a failed write changed the file")
	}
	w.err = nil
	if got := p.Sync(); got.Err() != nil || !got.Changed || read(t, dir, "ca.pem") == before {
		t.Errorf("the sync after the failure: %v changed=%v", got.Err(), got.Changed)
	}
}

// The first sync first tells the observers what a previous run left: a restarted
// pipeline starts from the app's state, not from nothing.
func TestSync_TheFirstSyncTellsWhatAPreviousRunLeft(t *testing.T) {
	dir := t.TempDir()
	src := &sources{changed: make(chan struct{}, 1)}
	src.set(fixtures.CA("a"))
	first, _ := newPipeline(t, dir, src, false)
	first.Sync()

	o := &told{}
	restarted, _ := newPipeline(t, dir, src, false, o)
	restarted.Sync()
	if len(o.got) != 2 || !o.got[0].FromDisk || o.got[1].FromDisk {
		t.Fatalf("told %d times (from disk first?), want the files on disk, then the sync", len(o.got))
	}
	onDisk, _ := o.got[0].Now.State()
	synced, complete := o.got[1].Now.State()
	if onDisk != synced || !complete {
		t.Errorf("the state on disk %q differs from the same sources' %q", onDisk, synced)
	}
	if o.got[1].Changed {
		t.Error("a restart with nothing new rewrote the files")
	}
}

// A certificate is written in the same swap as the trust files; one that cannot be
// written is refused and the pipeline keeps the one it had.
func TestRun_ACertificateOfferIsWrittenWithTheTrustFilesOrRefused(t *testing.T) {
	dir := t.TempDir()
	src := &sources{changed: make(chan struct{}, 1)}
	src.set(fixtures.CA("a"))
	p, w := newPipeline(t, dir, src, true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	offer := certificate.OfferTo(p.Offers())
	cert := func(name string) map[string]render.File {
		return map[string]render.File{v1alpha1.FileCertificate: {Data: []byte(name), Mode: 0o644}, v1alpha1.FileKey: {Data: []byte("key of " + name), Mode: 0o600}}
	}
	if err := offer(ctx, cert("cert-1")); err != nil {
		t.Fatal(err)
	}
	if read(t, dir, v1alpha1.FileCertificate) != "cert-1" || read(t, dir, v1alpha1.FileKey) != "key of cert-1" || !strings.Contains(read(t, dir, "ca.pem"), "CERTIFICATE") {
		t.Fatal("the certificate, its key and the trust file are not all written")
	}
	w.err = errors.New("read-only file system")
	if err := offer(ctx, cert("cert-2")); err == nil || !strings.Contains(err.Error(), "read-only file system") {
		t.Fatalf("an unwritable certificate was accepted: %v", err)
	}
	w.err = nil
	// A change of the sources now writes the trust files with the certificate kept.
	src.set(fixtures.CA("a"), fixtures.CA("b"))
	src.changed <- struct{}{}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(read(t, dir, "ca.pem"), "BEGIN CERTIFICATE") != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the change never reached the trust file")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if read(t, dir, v1alpha1.FileCertificate) != "cert-1" {
		t.Error("the refused certificate replaced the one written")
	}
}

// A bundle Admit refuses is left out of the files, and whether it is admitted is asked
// again at each sync: a grant withdrawn (or a bundle relabelled out of one) takes
// effect at the next sync, and one given back too.
func TestSync_ABundleAdmitRefusesIsLeftOutAtEachSync(t *testing.T) {
	dir := t.TempDir()
	sourcesList, err := v1alpha1.ParseSources([]byte(`[{"signerName": "example.com/s", "labelSelector": {}, "path": "ca.pem"}]`))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := render.NewPlan(sourcesList, "apps", false)
	if err != nil {
		t.Fatal(err)
	}
	a, b := fixtures.CA("a"), fixtures.CA("b")
	bundle := func(name string, ca *fixtures.Cert) *certificatesv1.ClusterTrustBundle {
		return &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "example.com:s:" + name},
			Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: "example.com/s", TrustBundle: fixtures.Bundle(ca)}}
	}
	src := &sources{changed: make(chan struct{}, 1), bundles: []*certificatesv1.ClusterTrustBundle{bundle("a", a), bundle("b", b)}}
	refused := map[string]bool{"example.com:s:b": true}
	p := New(Config{Plan: plan, Sources: src, Writer: write.NewAtomicWriter(dir),
		Admit: func(b *certificatesv1.ClusterTrustBundle) error {
			if refused[b.Name] {
				return errors.New("not granted")
			}
			return nil
		}})

	for _, step := range []struct {
		name      string
		refused   []string
		want, not []*fixtures.Cert
	}{
		{name: "the refused bundle is left out", refused: []string{"example.com:s:b"}, want: []*fixtures.Cert{a}, not: []*fixtures.Cert{b}},
		{name: "a refusal taking effect removes it at the next sync", refused: []string{"example.com:s:a"}, want: []*fixtures.Cert{b}, not: []*fixtures.Cert{a}},
		{name: "nothing refused writes both", want: []*fixtures.Cert{a, b}},
	} {
		clear(refused)
		for _, name := range step.refused {
			refused[name] = true
		}
		if w := p.Sync(); w.Err() != nil {
			t.Fatalf("%s: %v", step.name, w.Err())
		}
		holdsJust(t, step.name, read(t, dir, "ca.pem"), step.want, step.not)
	}
}

// A recheck syncs though no source changed: a grant withdrawn reaches a running
// pipeline at once, not at the next resync minutes away.
func TestRun_ARecheckSyncsWithoutAChangeOfTheSources(t *testing.T) {
	dir := t.TempDir()
	src := &sources{changed: make(chan struct{}, 1)}
	a := fixtures.CA("recheck")
	src.set(a)
	var refused atomic.Bool
	recheck := make(chan struct{}, 1)
	sourcesList, err := v1alpha1.ParseSources([]byte(`[{"name": "corp", "path": "ca.pem"}, {"defaultCAs": true, "path": "roots.pem"}]`))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := render.NewPlan(sourcesList, "apps", false)
	if err != nil {
		t.Fatal(err)
	}
	o := &told{}
	p := New(Config{Plan: plan, Sources: src, Writer: write.NewAtomicWriter(dir), Observers: []observe.Observer{o}, Recheck: recheck,
		Admit: func(*certificatesv1.ClusterTrustBundle) error {
			if refused.Load() {
				return errors.New("not granted")
			}
			return nil
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitTold := func(what string, ok func(observe.Written) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if n := len(o.snapshot()); n > 0 && ok(o.snapshot()[n-1]) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("never told %s", what)
	}
	waitTold("the first sync, with the bundle", func(w observe.Written) bool { return w.Err() == nil })
	refused.Store(true)
	recheck <- struct{}{}
	waitTold("a sync writing ca.pem without the bundle", func(w observe.Written) bool {
		return w.Reached() && w.Err() == nil && !strings.Contains(read(t, dir, "ca.pem"), string(a.CertPEM()))
	})
}

// A grant withdrawn from one source of a file takes that source's anchors out, and the
// file goes on following the sources still granted; a verdict that cannot be told yet
// keeps the file as it is. (The agent's volumes kept the ungranted bundle for the
// pod's life, and stopped following the granted ones, when a refusal failed the file.)
func TestSync_AWithdrawnGrantIsTakenOutAndTheRestFollowed(t *testing.T) {
	dir := t.TempDir()
	sourcesList, err := v1alpha1.ParseSources([]byte(`[{"name": "corp-root", "path": "ca.pem"}, {"name": "partner", "path": "ca.pem"}]`))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := render.NewPlan(sourcesList, "apps", false)
	if err != nil {
		t.Fatal(err)
	}
	named := func(name string, ca *fixtures.Cert) *certificatesv1.ClusterTrustBundle {
		return &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: fixtures.Bundle(ca)}}
	}
	corp1, corp2, partner := fixtures.CA("corp 1"), fixtures.CA("corp 2"), fixtures.CA("partner")
	src := &sources{changed: make(chan struct{}, 1)}
	verdict := map[string]error{}
	p := New(Config{Plan: plan, Sources: src, Writer: write.NewAtomicWriter(dir),
		Admit: func(b *certificatesv1.ClusterTrustBundle) error { return verdict[b.Name] }})
	for _, step := range []struct {
		name      string
		corp      *fixtures.Cert
		verdict   map[string]error
		want, not []*fixtures.Cert
		failed    bool
	}{
		{name: "both granted", corp: corp1, want: []*fixtures.Cert{corp1, partner}},
		{name: "partner's grant withdrawn: its anchors are taken out", corp: corp1, verdict: map[string]error{"partner": errors.New("not granted")},
			want: []*fixtures.Cert{corp1}, not: []*fixtures.Cert{partner}},
		{name: "corp-root, still granted, rotates and the file follows", corp: corp2, verdict: map[string]error{"partner": errors.New("not granted")},
			want: []*fixtures.Cert{corp2}, not: []*fixtures.Cert{corp1, partner}},
		{name: "a verdict that cannot be told keeps the file as it is", corp: corp1, verdict: map[string]error{"corp-root": fmt.Errorf("%w: grants not listed", watch.ErrUndecided), "partner": errors.New("not granted")},
			want: []*fixtures.Cert{corp2}, not: []*fixtures.Cert{corp1, partner}, failed: true},
		{name: "granted again, it comes back", corp: corp1, want: []*fixtures.Cert{corp1, partner}},
	} {
		src.bundles = []*certificatesv1.ClusterTrustBundle{named("corp-root", step.corp), named("partner", partner)}
		clear(verdict)
		maps.Copy(verdict, step.verdict)
		w := p.Sync()
		if failed := w.Failed["ca.pem"] != nil; failed != step.failed {
			t.Errorf("%s: ca.pem failed = %v (%v), want %v", step.name, failed, w.Err(), step.failed)
		}
		holdsJust(t, step.name, read(t, dir, "ca.pem"), step.want, step.not)
	}
}

// holdsJust checks that the file's text holds every one of want and none of not.
func holdsJust(t *testing.T, step, text string, want, not []*fixtures.Cert) {
	t.Helper()
	for _, c := range want {
		if !strings.Contains(text, string(c.CertPEM())) {
			t.Errorf("%s: ca.pem lacks %s", step, c.Cert.Subject.CommonName)
		}
	}
	for _, c := range not {
		if strings.Contains(text, string(c.CertPEM())) {
			t.Errorf("%s: ca.pem holds %s", step, c.Cert.Subject.CommonName)
		}
	}
}
