package certificate

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustsync/trustsync/delivery/podevents"
	"github.com/trustsync/trustsync/delivery/podevents/podeventstest"
	"github.com/trustsync/trustsync/delivery/render"
	"github.com/trustsync/trustsync/test/fixtures"
)

var certNow = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func leafValid(notBefore time.Time, life time.Duration) *x509.Certificate {
	return &x509.Certificate{NotBefore: notBefore, NotAfter: notBefore.Add(life)}
}

func TestRotationDeadline_IsBetween70And90PercentOfTheActualLifetime(t *testing.T) {
	leaf := leafValid(certNow, 10*time.Hour)
	for _, tc := range []struct {
		jitter float64
		want   time.Duration
	}{{0, 7 * time.Hour}, {0.5, 8 * time.Hour}, {0.9999, 9*time.Hour - 720*time.Millisecond}} {
		if got := rotationDeadline(leaf, tc.jitter).Sub(certNow); got.Round(time.Second) != tc.want.Round(time.Second) {
			t.Errorf("jitter %v: deadline at %s, want %s", tc.jitter, got, tc.want)
		}
	}
}

// The deadline is drawn once per certificate: a loop woken early (a failed renewal's
// backoff, say) asks again and gets the same answer, so rotations spread evenly over
// 70-90% of the lifetime with their mean at 80%, not drifting late.
func TestSchedule_RotationPointsSpreadEvenlyWhateverTheWakeUps(t *testing.T) {
	const certs = 20000
	life := 10 * time.Hour
	leaf := leafValid(certNow, life)
	rng := rand.New(rand.NewPCG(1, 2))
	draws := 0
	jitter := func() float64 { draws++; return rng.Float64() }
	var sum, lo, hi float64 = 0, 1, 0
	for range certs {
		cert := &issuedCert{leaf: leaf}
		var s schedule
		now := certNow
		for {
			d := s.deadline(cert, jitter)
			if !now.Before(d) {
				break
			}
			// Woken every 3% of the lifetime, or at the deadline.
			now = now.Add(life * 3 / 100)
			if now.After(d) {
				now = d
			}
		}
		f := float64(now.Sub(certNow)) / float64(life)
		sum += f
		lo, hi = min(lo, f), max(hi, f)
	}
	if draws != certs {
		t.Errorf("%d draws for %d certificates; want one each", draws, certs)
	}
	if mean := sum / certs; mean < 0.795 || mean > 0.805 {
		t.Errorf("mean rotation point %.4f of the lifetime, want 0.80", mean)
	}
	if lo < 0.7 || hi >= 0.9 {
		t.Errorf("rotation points span [%.4f, %.4f], want within [0.70, 0.90)", lo, hi)
	}
}

// Retries after a failure are spread over half to one and a half times the backoff, so
// pods that failed together do not retry together; the mean stays the backoff.
func TestRetryDelay_SpreadsEachBackoff(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 3, 20} {
		base := backoffDelay(n)
		var sum time.Duration
		lo, hi := time.Duration(1<<62), time.Duration(0)
		const tries = 10000
		for range tries {
			d := retryDelay(n, rng.Float64())
			sum += d
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo < base/2 || hi >= base*3/2 {
			t.Errorf("n=%d: delays span [%s, %s], want within [%s, %s)", n, lo, hi, base/2, base*3/2)
		}
		if hi-lo < base*9/10 {
			t.Errorf("n=%d: delays span only %s of a possible %s: not spread", n, hi-lo, base)
		}
		if mean := sum / tries; mean < base*98/100 || mean > base*102/100 {
			t.Errorf("n=%d: mean delay %s, want about %s", n, mean, base)
		}
	}
}

func TestBackoffDelay_DoublesAndCapsAtFiveMinutes(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 64 * time.Second, 128 * time.Second, 256 * time.Second, 5 * time.Minute, 5 * time.Minute}
	for n, w := range want {
		if got := backoffDelay(n); got != w {
			t.Errorf("backoffDelay(%d) = %s, want %s", n, got, w)
		}
	}
	if got := backoffDelay(1000); got != 5*time.Minute {
		t.Errorf("backoffDelay(1000) = %s", got)
	}
}

// fakeCSRs is the CSR API: decide answers each request; with block, waiting lasts
// until the context ends (a request nobody acts on).
type fakeCSRs struct {
	mu      sync.Mutex
	stored  map[string]*certificatesv1.CertificateSigningRequest
	creates []string
	decide  func(*certificatesv1.CertificateSigningRequest) *certificatesv1.CertificateSigningRequest
	block   bool
	// createErr fails every create (the API server unreachable, say); attempts counts
	// the creates tried.
	createErr error
	attempts  int
}

func (f *fakeCSRs) create(_ context.Context, csr *certificatesv1.CertificateSigningRequest) (*certificatesv1.CertificateSigningRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if f.createErr != nil {
		return nil, f.createErr
	}
	if f.stored == nil {
		f.stored = map[string]*certificatesv1.CertificateSigningRequest{}
	}
	if _, ok := f.stored[csr.Name]; ok {
		return nil, apierrors.NewAlreadyExists(schema.GroupResource{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}, csr.Name)
	}
	f.stored[csr.Name] = csr.DeepCopy()
	f.creates = append(f.creates, csr.Name)
	return csr, nil
}

func (f *fakeCSRs) waitDone(ctx context.Context, name string) (*certificatesv1.CertificateSigningRequest, error) {
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	f.mu.Lock()
	csr := f.stored[name]
	f.mu.Unlock()
	return f.decide(csr.DeepCopy()), nil
}

// signWith issues every request from ca for life (whatever was asked).
func signWith(ca *fixtures.Cert, life time.Duration) func(*certificatesv1.CertificateSigningRequest) *certificatesv1.CertificateSigningRequest {
	return func(csr *certificatesv1.CertificateSigningRequest) *certificatesv1.CertificateSigningRequest {
		block, _ := pem.Decode(csr.Spec.Request)
		req, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			panic(err)
		}
		leaf := fixtures.MustNew(fixtures.Options{Leaf: true, Parent: ca, NotBefore: certNow.Add(-5 * time.Minute), NotAfter: certNow.Add(life), PublicKey: req.PublicKey, URIs: req.URIs})
		csr.Status.Certificate = leaf.CertPEM()
		return csr
	}
}

func deny(csr *certificatesv1.CertificateSigningRequest) *certificatesv1.CertificateSigningRequest {
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: "TrustsyncPolicyDenied", Message: `DNS SAN "x" is not allowed`,
	})
	return csr
}

// writer stands for the pipeline a manager delivers to: it counts the swaps it is
// asked for, and fails them with err.
type writer struct {
	writes int
	err    error
}

func (w *writer) deliver(_ context.Context, files map[string]render.File) error {
	if w.err != nil {
		return w.err
	}
	if _, ok := files[fileCert]; !ok {
		return errors.New("delivered without a certificate")
	}
	w.writes++
	return nil
}

func newTestCertManager(t *testing.T, stateDir string, api csrAPI, expirationSeconds int32) (*Manager, *podeventstest.Recorder, *writer) {
	events := &podeventstest.Recorder{}
	clk := clocktesting.NewFakeClock(certNow)
	m := &Manager{
		opts: Options{Signer: "trustsync.io/workload", KeyType: "ECDSAP256", Identity: spiffeid.RequireFromString("spiffe://cluster.local/ns/apps/sa/web"),
			PodName: "web-1", PodUID: "uid-1", StateDir: stateDir, ExpirationSeconds: expirationSeconds, CredentialBundle: true},
		api: api, clock: clk, jitter: func() float64 { return 0.5 }, events: events, failing: podevents.Throttle{Clock: clk},
	}
	return m, events, &writer{}
}

func TestCertManager_IssuedCertificateAndKeyAreWrittenTogether(t *testing.T) {
	ca := fixtures.CA("signer")
	stateDir := t.TempDir()
	api := &fakeCSRs{decide: signWith(ca, time.Hour)}
	// Asks for 10 hours; the signer gives 1 hour. The issued lifetime is what counts.
	m, events, w := newTestCertManager(t, stateDir, api, 36000)
	if err := m.Obtain(context.Background(), w.deliver); err != nil {
		t.Fatal(err)
	}
	files := m.Files()
	issued, err := parseIssued(files[fileCert].Data, files[fileKey].Data)
	if err != nil {
		t.Fatalf("certificate and key do not match: %v", err)
	}
	if files[fileKey].Mode != 0o600 || files[fileCredential].Mode != 0o600 || !strings.HasPrefix(string(files[fileCredential].Data), "-----BEGIN PRIVATE KEY-----") {
		t.Errorf("modes %v %v; credential.pem must start with the key", files[fileKey].Mode, files[fileCredential].Mode)
	}
	if w.writes != 1 {
		t.Errorf("%d writes, want one swap for certificate and key", w.writes)
	}
	if _, err := os.Stat(filepath.Join(stateDir, pendingKeyFile)); !os.IsNotExist(err) {
		t.Error("the pending key outlived its issuance: the next request would reuse it")
	}
	if got := rotationDeadline(issued.leaf, 0.5).Sub(certNow); got > time.Hour || got < 40*time.Minute {
		t.Errorf("rotation in %s: it must follow the issued hour, not the requested ten", got)
	}
	if api.stored[api.creates[0]].Spec.ExpirationSeconds == nil || *api.stored[api.creates[0]].Spec.ExpirationSeconds != 36000 {
		t.Error("the request did not carry expirationSeconds")
	}
	if got := events.Events(); len(got) != 1 || !strings.HasPrefix(got[0], "Normal CertificateIssued") {
		t.Errorf("events = %q", got)
	}
}

// A restarted sidecar resumes the request it made: same key, same CSR name, no second
// CSR.
func TestCertManager_ResumesTheSameRequestAfterARestart(t *testing.T) {
	stateDir := t.TempDir()
	api := &fakeCSRs{block: true}
	first, _, w := newTestCertManager(t, stateDir, api, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := first.Obtain(ctx, w.deliver); err == nil {
		t.Fatal("a request nobody acted on was issued")
	}

	ca := fixtures.CA("signer")
	api.block, api.decide = false, signWith(ca, time.Hour)
	restarted, _, _ := newTestCertManager(t, stateDir, api, 0)
	if err := restarted.Obtain(context.Background(), w.deliver); err != nil {
		t.Fatal(err)
	}
	if len(api.creates) != 1 {
		t.Fatalf("CSRs created = %q, want one", api.creates)
	}
	if !strings.HasPrefix(api.creates[0], "trustsync-web-1-") {
		t.Errorf("CSR name %q does not name the pod", api.creates[0])
	}
	if restarted.Files() == nil {
		t.Error("the resumed request's certificate was not taken")
	}
}

func TestCertManager_ADeniedRequestLeavesNoKeyOrCertificate(t *testing.T) {
	stateDir := t.TempDir()
	api := &fakeCSRs{decide: deny}
	m, events, w := newTestCertManager(t, stateDir, api, 0)
	err := m.Obtain(context.Background(), w.deliver)
	if err == nil || !strings.Contains(err.Error(), "was denied (TrustsyncPolicyDenied)") {
		t.Fatalf("err = %v", err)
	}
	if m.Files() != nil || w.writes != 0 {
		t.Error("a denied request produced files")
	}
	if _, err := os.Stat(filepath.Join(stateDir, pendingKeyFile)); !os.IsNotExist(err) {
		t.Error("the denied request's key was kept: the retry would be denied again by name")
	}
	if got := events.Events(); len(got) != 1 || !strings.HasPrefix(got[0], "Warning CertificateRequestDenied") {
		t.Errorf("events = %q", got)
	}
	// The retry starts over with a fresh key and a new request.
	api.decide = signWith(fixtures.CA("signer"), time.Hour)
	if err := m.Obtain(context.Background(), w.deliver); err != nil || len(api.creates) != 2 || api.creates[0] == api.creates[1] {
		t.Errorf("retry: err %v, creates %q", err, api.creates)
	}
}

// A failed renewal keeps the certificate in use: rotation is early enough that retries
// have time.
func TestCertManager_AFailedRenewalKeepsTheCurrentCertificate(t *testing.T) {
	ca := fixtures.CA("signer")
	api := &fakeCSRs{decide: signWith(ca, time.Hour)}
	m, _, w := newTestCertManager(t, t.TempDir(), api, 0)
	if err := m.Obtain(context.Background(), w.deliver); err != nil {
		t.Fatal(err)
	}
	before := m.Files()[fileCert].Data
	api.decide = deny
	if err := m.Obtain(context.Background(), w.deliver); err == nil {
		t.Fatal("expected the renewal to fail")
	}
	if string(m.Files()[fileCert].Data) != string(before) {
		t.Error("a failed renewal replaced the working certificate")
	}
	w.err = os.ErrPermission
	api.decide = signWith(ca, time.Hour)
	if err := m.Obtain(context.Background(), w.deliver); err == nil || string(m.Files()[fileCert].Data) != string(before) {
		t.Errorf("an unwritable new certificate must not replace the current one: %v", err)
	}
}

func TestCertManager_AdoptsOnlyAMatchingPair(t *testing.T) {
	ca := fixtures.CA("signer")
	leaf := fixtures.MustNew(fixtures.Options{Leaf: true, Parent: ca})
	other := fixtures.MustNew(fixtures.Options{Leaf: true, Parent: ca})
	m, _, _ := newTestCertManager(t, t.TempDir(), &fakeCSRs{}, 0)
	m.Adopt(map[string]render.File{fileCert: {Data: leaf.CertPEM()}, fileKey: {Data: other.KeyPEM()}})
	if m.Files() != nil {
		t.Fatal("adopted a certificate with another's key")
	}
	m.Adopt(map[string]render.File{fileCert: {Data: leaf.CertPEM()}, fileKey: {Data: leaf.KeyPEM()}})
	if m.Files() == nil {
		t.Fatal("did not adopt the previous run's certificate")
	}
}

func TestGenerateKey_EveryKeyTypeMakesARequest(t *testing.T) {
	for _, kt := range []string{"ECDSAP256", "ECDSAP384", "RSA2048", "RSA3072", "ED25519"} {
		key, err := generateKey(kt)
		if err != nil {
			t.Fatalf("%s: %v", kt, err)
		}
		m, _, _ := newTestCertManager(t, t.TempDir(), &fakeCSRs{}, 0)
		if _, csr, err := m.request(key); err != nil || len(csr.Spec.Request) == 0 {
			t.Errorf("%s: %v", kt, err)
		}
		if back, err := decodeKey(encodeKey(key)); err != nil || !publicKeysEqual(back.Public(), key.Public()) {
			t.Errorf("%s: key does not round-trip: %v", kt, err)
		}
	}
}

func (f *fakeCSRs) setCreateErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.createErr = err
}

func (f *fakeCSRs) attempted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts
}

// A renewal that keeps failing is a Warning Event on the pod, as a stale trust file
// is: once when it starts or changes, again every ten minutes while it lasts, never
// once per retry; a denial has its own Event and is not repeated as a failure.
func TestCertManager_AFailingRenewalIsAWarningOnThePod(t *testing.T) {
	ca := fixtures.CA("signer")
	api := &fakeCSRs{decide: signWith(ca, time.Hour)}
	m, events, w := newTestCertManager(t, t.TempDir(), api, 0)
	clk := m.clock.(*clocktesting.FakeClock)
	api.setCreateErr(errors.New("connection refused"))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); m.run(ctx, w.deliver) }()
	defer func() { cancel(); <-done }()

	// until waits for the loop to have tried n creates and to be waiting on the clock.
	until := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for api.attempted() < n || !clk.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatalf("the renewal loop made %d attempts, want %d; events %q", api.attempted(), n, events.Events())
			}
			time.Sleep(time.Millisecond)
		}
	}
	want := []string{"Warning CertificateRenewalFailed: Cannot obtain a workload certificate; the app has none yet; retrying: failed to create CertificateSigningRequest"}
	check := func(step string) {
		t.Helper()
		got := events.Events()
		if len(got) != len(want) {
			t.Fatalf("%s: events %q, want %d", step, got, len(want))
		}
		for i := range want {
			if !strings.HasPrefix(got[i], want[i]) {
				t.Fatalf("%s: event %d = %q, want it to start %q", step, i, got[i], want[i])
			}
		}
	}

	until(1)
	check("the first failure")
	clk.Step(time.Minute) // past the first retry
	until(2)
	check("the same failure again, within ten minutes")

	api.setCreateErr(nil)
	clk.Step(5 * time.Minute)
	until(3)
	want = append(want, "Normal CertificateIssued")
	check("issued")

	// Due for renewal (80% of the hour), and the API server is gone again.
	api.setCreateErr(errors.New("connection refused"))
	clk.Step(50 * time.Minute)
	until(4)
	want = append(want, "Warning CertificateRenewalFailed: Cannot renew the workload certificate; keeping the current one, valid until ")
	check("a failing renewal after a recovery")
	clk.Step(11 * time.Minute)
	until(5)
	want = append(want, want[len(want)-1])
	check("the same failure, ten minutes on")

	api.setCreateErr(nil)
	api.decide = deny
	clk.Step(6 * time.Minute)
	until(6)
	want = append(want, "Warning CertificateRequestDenied")
	check("a denial has its own Event only")
}
