// Package certificate obtains and rotates a pod's workload certificate through the
// CertificateSigningRequest API. It is one more input of the pod's pipeline: each new
// certificate is offered to the pipeline, which writes it with the trust files in one
// swap and answers whether it could.
package certificate

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustsync/trustsync/api/v1alpha1"
	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/delivery/metrics"
	"github.com/trustsync/trustsync/delivery/podevents"
	"github.com/trustsync/trustsync/delivery/render"
	"github.com/trustsync/trustsync/policy"
)

// The workload certificate's files (contract.File*), and the pending key's in the
// state directory.
const (
	fileCert       = v1alpha1.FileCertificate
	fileKey        = v1alpha1.FileKey
	fileCredential = v1alpha1.FileCredentialBundle
	pendingKeyFile = "pending.key"

	reasonCertIssued  = "CertificateIssued"
	reasonCertDenied  = "CertificateRequestDenied"
	reasonCertFailing = "CertificateRenewalFailed"
)

// Options describe the certificate to request.
type Options struct {
	Signer            string
	ExpirationSeconds int32
	DNSNames          []string
	KeyType           string
	CredentialBundle  bool
	// Identity is the SPIFFE ID the certificate is requested for.
	Identity        spiffeid.ID
	PodName, PodUID string
	// StateDir keeps the pending key, where the app does not read it.
	StateDir string
}

// issuedCert is a certificate the sidecar holds, with its key.
type issuedCert struct {
	chainPEM []byte // as issued: the leaf, then intermediates
	keyPEM   []byte
	leaf     *x509.Certificate
}

// Manager obtains and rotates the workload certificate through the CSR API, as
// the kubelet's client certificate manager does (KEP-266): the key is kept, in a
// sidecar-only directory, until a CSR made from it is issued, so a restart resumes the
// same request; the CSR is named from the key and the pod, so a restarted sidecar waits
// on the CSR it created instead of making another; rotation happens at a jittered
// point between 70% and 90% of the issued certificate's own lifetime, with a fresh key;
// failures keep the current certificate and retry with capped, jittered backoff.
type Manager struct {
	opts    Options
	api     csrAPI
	clock   clock.Clock
	jitter  func() float64
	events  podevents.Recorder
	metrics *metrics.Metrics
	// failing throttles CertificateRenewalFailed Events to one per new failure.
	failing podevents.Throttle

	mu      sync.Mutex
	current *issuedCert
}

// New returns a manager requesting through csrs (a certificates.k8s.io/v1 client) and
// recording Events on the pod; m may be nil.
func New(opts Options, csrs rest.Interface, events podevents.Recorder, m *metrics.Metrics) *Manager {
	clk := clock.RealClock{}
	return &Manager{opts: opts, api: restCSRs{c: csrs, poll: csrPollFirst, pollCap: csrPollCap}, clock: clk, jitter: mrand.Float64,
		events: events, metrics: m, failing: podevents.Throttle{Clock: clk}}
}

// Deliver writes a new certificate's files with the trust files, in one swap, and says
// whether they were written.
type Deliver func(ctx context.Context, files map[string]render.File) error

// Offer is a new certificate handed to the pipeline that writes it; the pipeline
// answers on Written (nil: written).
type Offer struct {
	Files   map[string]render.File
	Written chan<- error
}

// OfferTo delivers through offers: the pipeline's loop receives the offer as one more
// input, writes, and answers.
func OfferTo(offers chan<- Offer) Deliver {
	return func(ctx context.Context, files map[string]render.File) error {
		answer := make(chan error, 1)
		select {
		case offers <- Offer{Files: files, Written: answer}:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case err := <-answer:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// csrAPI is what the manager needs of the CSR API.
type csrAPI interface {
	create(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) (*certificatesv1.CertificateSigningRequest, error)
	// waitDone blocks until the named CSR is issued, denied or failed.
	waitDone(ctx context.Context, name string) (*certificatesv1.CertificateSigningRequest, error)
}

// Files returns the current certificate's files, or none before the first issuance.
func (m *Manager) Files() map[string]render.File {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.files(m.current)
}

func (m *Manager) files(c *issuedCert) map[string]render.File {
	if c == nil {
		return nil
	}
	out := map[string]render.File{
		fileCert: {Data: c.chainPEM, Mode: 0o644},
		// The sidecar runs as the app's uid, so 0600 still lets the app read its key.
		fileKey: {Data: c.keyPEM, Mode: 0o600},
	}
	if m.opts.CredentialBundle {
		out[fileCredential] = render.File{Data: append(append([]byte{}, c.keyPEM...), c.chainPEM...), Mode: 0o600}
	}
	return out
}

// Adopt takes over a certificate and key a previous run wrote, if they belong
// together: a container restart must not cost a new certificate.
func (m *Manager) Adopt(existing map[string]render.File) {
	c, err := parseIssued(existing[fileCert].Data, existing[fileKey].Data)
	if err != nil {
		return
	}
	m.mu.Lock()
	m.current = c
	m.mu.Unlock()
}

func parseIssued(chainPEM, keyPEM []byte) (*issuedCert, error) {
	block, _ := pem.Decode(chainPEM)
	if block == nil {
		return nil, errors.New("no certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := decodeKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if !publicKeysEqual(leaf.PublicKey, key.Public()) {
		return nil, errors.New("the certificate is not for this key")
	}
	return &issuedCert{chainPEM: chainPEM, keyPEM: keyPEM, leaf: leaf}, nil
}

// rotationDeadline is a jittered point between 70% and 90% of the certificate's actual
// lifetime, read from the certificate, never from the request. jitter is in [0, 1).
func rotationDeadline(leaf *x509.Certificate, jitter float64) time.Time {
	life := leaf.NotAfter.Sub(leaf.NotBefore)
	return leaf.NotBefore.Add(time.Duration(float64(life) * (0.7 + 0.2*jitter)))
}

// backoffDelay is the wait before retry attempt n (from 0): doubling from a second,
// capped at 5 minutes.
func backoffDelay(n int) time.Duration {
	d := time.Second
	for range n {
		if d *= 2; d >= 5*time.Minute {
			return 5 * time.Minute
		}
	}
	return d
}

// retryDelay is backoffDelay(n) spread over [0.5, 1.5) of itself by jitter in [0, 1),
// so pods that failed together (an API server outage) do not retry in lockstep.
func retryDelay(n int, jitter float64) time.Duration {
	return time.Duration(float64(backoffDelay(n)) * (0.5 + jitter))
}

// schedule holds the rotation deadline of one certificate, drawn once: drawing again
// on every wake-up would keep the earliest of several draws out of reach and drift
// rotations toward the late end of the window.
type schedule struct {
	cert *issuedCert
	at   time.Time
}

func (s *schedule) deadline(cert *issuedCert, jitter func() float64) time.Time {
	if s.cert != cert {
		s.cert, s.at = cert, rotationDeadline(cert.leaf, jitter())
	}
	return s.at
}

// Run keeps a valid certificate until ctx is done, offering each new one on offers.
func (m *Manager) Run(ctx context.Context, offers chan<- Offer) {
	m.run(ctx, OfferTo(offers))
}

func (m *Manager) run(ctx context.Context, deliver Deliver) {
	failures := 0
	var sched schedule
	for {
		var wait time.Duration
		m.mu.Lock()
		current := m.current
		m.mu.Unlock()
		if current != nil {
			m.metrics.CertificateExpiry(current.leaf.NotAfter)
			wait = sched.deadline(current, m.jitter).Sub(m.clock.Now())
		}
		if wait <= 0 {
			if err := m.Obtain(ctx, deliver); err != nil {
				if ctx.Err() != nil {
					return
				}
				m.metrics.RenewError()
				wait = retryDelay(failures, m.jitter())
				failures++
				klog.ErrorS(err, "Cannot obtain the workload certificate; keeping the current one and retrying", "retryIn", wait, "haveCertificate", current != nil)
				m.reportFailure(err, current)
			} else {
				failures = 0
				m.failing.Recovered()
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-m.clock.After(wait):
		}
	}
}

// reportFailure tells the pod, through a Warning Event, that the certificate could not
// be obtained and until when the current one (if any) serves; a denial already has
// its own Event. The message leaves out the retry time so that a lasting failure is
// recorded once (and again every repeatWarningTime), not on every retry.
func (m *Manager) reportFailure(err error, current *issuedCert) {
	var refused refusedError
	if errors.As(err, &refused) {
		return
	}
	msg := "Cannot obtain a workload certificate; the app has none yet; retrying: " + err.Error()
	if current != nil {
		msg = fmt.Sprintf("Cannot renew the workload certificate; keeping the current one, valid until %s; retrying: %v", current.leaf.NotAfter.UTC().Format(time.RFC3339), err)
	}
	if m.failing.Due(msg) {
		m.events.Warning(reasonCertFailing, msg)
	}
}

// refusedError is a request the signer denied or failed: the next attempt starts over.
type refusedError struct{ name, why string }

func (e refusedError) Error() string {
	return fmt.Sprintf("CertificateSigningRequest %q was %s", e.name, e.why)
}

// Obtain requests a certificate with the pending key (made and saved first if there is
// none), waits for it, and has deliver write it with its key.
func (m *Manager) Obtain(ctx context.Context, deliver Deliver) error {
	key, err := m.pendingKey()
	if err != nil {
		return err
	}
	name, csr, err := m.request(key)
	if err != nil {
		return err
	}
	if _, err := m.api.create(ctx, csr); apierrors.IsAlreadyExists(err) {
		// A restart, resuming: the name is derived from this key, so the CSR is ours.
		klog.InfoS("Resuming the pending certificate request", "csr", name)
	} else if err != nil {
		return fmt.Errorf("failed to create CertificateSigningRequest %q: %w", name, err)
	} else {
		klog.InfoS("Requested a workload certificate", "csr", name, "signer", m.opts.Signer, "identity", m.opts.Identity)
	}
	done, err := m.api.waitDone(ctx, name)
	if err != nil {
		return fmt.Errorf("waiting for CertificateSigningRequest %q: %w", name, err)
	}
	if refused := refusal(done); refused != "" {
		// The next attempt starts over with a fresh key and a new request.
		_ = os.Remove(filepath.Join(m.opts.StateDir, pendingKeyFile))
		m.events.Warning(reasonCertDenied, fmt.Sprintf("CertificateSigningRequest %s was %s", name, refused))
		return refusedError{name: name, why: refused}
	}
	issued, err := parseIssued(done.Status.Certificate, encodeKey(key))
	if err != nil {
		return fmt.Errorf("CertificateSigningRequest %q: the issued certificate is unusable: %w", name, err)
	}
	if err := deliver(ctx, m.files(issued)); err != nil {
		return fmt.Errorf("cannot write the new certificate: %w", err)
	}
	m.mu.Lock()
	m.current = issued
	m.mu.Unlock()
	// Written: the key now lives with its certificate, and the next request gets a new one.
	_ = os.Remove(filepath.Join(m.opts.StateDir, pendingKeyFile))
	m.metrics.CertificateExpiry(issued.leaf.NotAfter)
	m.events.Normal(reasonCertIssued, fmt.Sprintf("Certificate for %s issued, valid until %s", m.opts.Identity, issued.leaf.NotAfter.UTC().Format(time.RFC3339)))
	klog.InfoS("Wrote the workload certificate", "csr", name, "notAfter", issued.leaf.NotAfter)
	return nil
}

// refusal says why a CSR will not be issued ("denied: ..." or "failed: ..."), or "".
func refusal(csr *certificatesv1.CertificateSigningRequest) string {
	for _, c := range csr.Status.Conditions {
		if c.Status == corev1.ConditionFalse {
			continue
		}
		switch c.Type {
		case certificatesv1.CertificateDenied:
			return fmt.Sprintf("denied (%s): %s", c.Reason, c.Message)
		case certificatesv1.CertificateFailed:
			return fmt.Sprintf("failed (%s): %s", c.Reason, c.Message)
		}
	}
	return ""
}

// pendingKey returns the key a request is (or will be) made from, creating and saving
// it first when there is none, so a restart finds the same key.
func (m *Manager) pendingKey() (crypto.Signer, error) {
	path := filepath.Join(m.opts.StateDir, pendingKeyFile)
	if data, err := os.ReadFile(path); err == nil {
		if key, err := decodeKey(data); err == nil {
			return key, nil
		}
		klog.InfoS("Discarding an unreadable pending key", "path", path)
	}
	key, err := generateKey(m.opts.KeyType)
	if err != nil {
		return nil, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, encodeKey(key), 0o600); err != nil {
		return nil, fmt.Errorf("cannot save the pending key in %s: %w", m.opts.StateDir, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, err
	}
	return key, nil
}

// request builds the CSR for key. Its name is derived from the public key and the pod.
func (m *Manager) request(key crypto.Signer) (string, *certificatesv1.CertificateSigningRequest, error) {
	spki, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(append(spki, m.opts.PodUID...))
	prefix := m.opts.PodName
	if len(prefix) > 200 {
		prefix = prefix[:200]
	}
	name := "trustsync-" + prefix + "-" + hex.EncodeToString(sum[:8])
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: m.opts.DNSNames, URIs: []*url.URL{m.opts.Identity.URL()}}, key)
	if err != nil {
		return "", nil, fmt.Errorf("cannot build the certificate request: %w", err)
	}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth, certificatesv1.UsageClientAuth}
	if _, isRSA := key.(*rsa.PrivateKey); isRSA {
		usages = append(usages, certificatesv1.UsageKeyEncipherment)
	}
	csr := &certificatesv1.CertificateSigningRequest{
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: m.opts.Signer,
			Usages:     usages,
		},
	}
	csr.Name = name
	if m.opts.ExpirationSeconds > 0 {
		csr.Spec.ExpirationSeconds = &m.opts.ExpirationSeconds
	}
	return name, csr, nil
}

func generateKey(keyType string) (crypto.Signer, error) {
	switch keyType {
	case policy.KeyECDSAP256:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case policy.KeyECDSAP384:
		return ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case policy.KeyRSA2048:
		return rsa.GenerateKey(rand.Reader, 2048)
	case policy.KeyRSA3072:
		return rsa.GenerateKey(rand.Reader, 3072)
	case policy.KeyED25519:
		_, key, err := ed25519.GenerateKey(rand.Reader)
		return key, err
	}
	return nil, fmt.Errorf("unknown key type %q", keyType)
}

// encodeKey writes a key as PKCS#8 PEM.
func encodeKey(key crypto.Signer) []byte {
	data, err := tsbundle.EncodePrivateKey(key)
	if err != nil {
		panic(err) // every key generateKey makes marshals
	}
	return data
}

func decodeKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PKCS#8 PEM key")
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key of type %T cannot sign", key)
	}
	return signer, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}
