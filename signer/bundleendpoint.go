package signer

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/fips140"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/federation"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"golang.org/x/net/netutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
)

// endpointCertLifetime is how long the endpoint's own certificate is valid; it is
// renewed at half its life, and at once when the CA that signs changes.
const endpointCertLifetime = 24 * time.Hour

// bundleEndpoint serves each trust domain's SPIFFE bundle at /TD (the SPIFFE Trust
// Domain and Bundle spec's https_spiffe profile): the anchors its signers publish, the
// sequence of their last change and the refresh hint. go-spiffe writes the document
// and serves the TLS certificate; the endpoint decides what they hold.
//
// Every replica serves it, the standby too, from the CA Secrets it watches: the state
// saved there (anchors, the time they last changed) is the same for all, so peers see
// one bundle and one sequence whichever replica answers, and the Service needs no
// readiness gate (which would keep the standby unready and block drains).
type bundleEndpoint struct {
	// domains are the trust domains served, each with its signers in policy order;
	// the endpoint presents the certificate of the first domain.
	domains     map[spiffeid.TrustDomain][]*endpointSigner
	first       spiffeid.TrustDomain
	refreshHint time.Duration
	clock       clock.PassiveClock

	mu sync.Mutex
	// svid is the certificate presented, issuedBy the CA that signed it.
	svid     *x509svid.SVID
	issuedBy *x509.Certificate
}

// endpointSigner is one signer as its CA Secret last said.
type endpointSigner struct {
	signer, secretName string
	// keys finds the CA's key: the endpoint signs its own certificate with it.
	keys  caKeys
	state atomic.Pointer[endpointState]
}

// endpointState is what a signer's CA Secret holds for the endpoint: the anchors to
// publish, the sequence of their last change, and the CA that signs now.
type endpointState struct {
	anchors  []*x509.Certificate
	sequence uint64
	ca       *CA
}

// observe takes a CA Secret's state; one that does not parse leaves the last.
func (s *endpointSigner) observe(secret *corev1.Secret) {
	st, err := stateFromSecret(context.Background(), secret, s.keys)
	if err != nil {
		klog.ErrorS(err, "The bundle endpoint cannot read the CA Secret; it serves what it read before", "signer", s.signer)
		return
	}
	s.state.Store(&endpointState{anchors: st.anchors(), sequence: st.sequence(), ca: st.Current})
}

// newBundleEndpoint groups the signers by trust domain; order is the policy's.
func newBundleEndpoint(order []string, trustDomains map[string]spiffeid.TrustDomain, secretNames map[string]string, keys map[string]caKeys, refreshHint time.Duration) (*bundleEndpoint, error) {
	e := &bundleEndpoint{domains: map[spiffeid.TrustDomain][]*endpointSigner{}, refreshHint: refreshHint, clock: clock.RealClock{}}
	for _, signer := range order {
		td := trustDomains[signer]
		if td.IsZero() {
			return nil, fmt.Errorf("signer %s has no trust domain: the policy was not parsed", signer)
		}
		if len(e.domains) == 0 {
			e.first = td
		}
		e.domains[td] = append(e.domains[td], &endpointSigner{signer: signer, secretName: secretNames[signer], keys: keys[signer]})
	}
	return e, nil
}

// watch follows each signer's CA Secret (by name: the Role allows no other) until
// ctx ends.
func (e *bundleEndpoint) watch(ctx context.Context, client kubernetes.Interface, namespace string) {
	for _, signers := range e.domains {
		for _, s := range signers {
			factory := informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithNamespace(namespace), informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
				lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.secretName).String()
			}))
			observe := func(obj any) {
				if secret, ok := obj.(*corev1.Secret); ok {
					s.observe(secret)
				}
			}
			// A deleted Secret is recreated by the leader; until then the last state is
			// served: never an empty bundle.
			_, _ = factory.Core().V1().Secrets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: observe, UpdateFunc: func(_, n any) { observe(n) }})
			factory.Start(ctx.Done())
		}
	}
}

// GetBundleForTrustDomain is the bundle served for td: the union of its signers'
// anchors, with the highest of their sequences. A signer whose CA Secret has not been
// read yet makes the domain unavailable rather than served incomplete.
func (e *bundleEndpoint) GetBundleForTrustDomain(td spiffeid.TrustDomain) (*spiffebundle.Bundle, error) {
	signers, ok := e.domains[td]
	if !ok {
		return nil, fmt.Errorf("trust domain %q is not served here", td)
	}
	b := spiffebundle.New(td)
	var sequence uint64
	for _, s := range signers {
		st := s.state.Load()
		if st == nil {
			return nil, fmt.Errorf("signer %s has no CA yet", s.signer)
		}
		for _, a := range st.anchors {
			b.AddX509Authority(a)
		}
		sequence = max(sequence, st.sequence)
	}
	b.SetSequenceNumber(sequence)
	b.SetRefreshHint(e.refreshHint)
	return b, nil
}

// GetX509SVID is the endpoint's certificate, spiffe://TD/trustsync/bundle-endpoint for
// the first trust domain, issued by that domain's first signer's signing CA: renewed
// at half its life or when that CA changes, so a rotation moves the endpoint to the
// new CA with the rest.
func (e *bundleEndpoint) GetX509SVID() (*x509svid.SVID, error) {
	st := e.domains[e.first][0].state.Load()
	if st == nil {
		return nil, errors.New("the signing CA is not loaded yet")
	}
	ca := st.ca
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.clock.Now()
	if s := e.svid; s != nil && e.issuedBy.Equal(ca.Cert) && now.Before(halfLife(s.Certificates[0])) {
		return s, nil
	}
	s, err := issueEndpointSVID(e.first, ca, now)
	if err != nil {
		return nil, fmt.Errorf("issue the bundle endpoint's certificate: %w", err)
	}
	e.svid, e.issuedBy = s, ca.Cert
	klog.InfoS("Issued the bundle endpoint's certificate", "id", s.ID.String(), "notAfter", s.Certificates[0].NotAfter, "ca", bundle.AnchorID(ca.Cert.Raw))
	return s, nil
}

func halfLife(c *x509.Certificate) time.Time {
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) / 2)
}

// issueEndpointSVID makes an X509-SVID for the endpoint: one URI SAN, not a CA,
// digital signature only, a fresh P-256 key that never leaves memory.
func issueEndpointSVID(td spiffeid.TrustDomain, ca *CA, now time.Time) (*x509svid.SVID, error) {
	id, err := spiffeid.FromPath(td, v1alpha1.BundleEndpointPath)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := bundle.NewSerialNumber()
	if err != nil {
		return nil, err
	}
	notBefore, notAfter, err := validity(now, endpointCertLifetime, ca.Cert)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, NotBefore: notBefore, NotAfter: notAfter,
		URIs:                  []*url.URL{id.URL()},
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	_, leaf, err := ca.issue(tmpl, key.Public())
	if err != nil {
		return nil, err
	}
	chain := []*x509.Certificate{leaf}
	if len(ca.Chain) > 0 {
		// An intermediate CA: the peer needs it to reach the anchor.
		chain = append(chain, ca.Cert)
		chain = append(chain, ca.Chain[:len(ca.Chain)-1]...)
	}
	return &x509svid.SVID{ID: id, Certificates: chain, PrivateKey: crypto.Signer(key)}, nil
}

// endpointLimits bound what clients may hold of the endpoint: it is meant to face
// the network (a LoadBalancer) and runs in the process that holds the CA keys, so
// nothing a client does may grow that process without bound.
type endpointLimits struct {
	maxConns, maxClientConns int
	idle                     time.Duration
}

// endpointReadTimeout bounds a request, from the TLS handshake to the end of its
// headers (there is no body): a slow client is cut, not waited for.
const endpointReadTimeout = 10 * time.Second

// serve listens on address while ctx lasts, serving every domain's bundle with
// go-spiffe's handler.
func (e *bundleEndpoint) serve(ctx context.Context, address string, limits endpointLimits) error {
	router := mux.NewRouter()
	domains := make([]string, 0, len(e.domains))
	for td := range e.domains {
		h, err := federation.NewHandler(td, e, federation.WithLogger(klogLogger{td: td.String()}))
		if err != nil {
			return err
		}
		router.Handle("/"+td.String(), thumbprintsAllowed(h))
		domains = append(domains, td.String())
	}
	slices.Sort(domains)
	router.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, fmt.Sprintf("no trust domain at %q; served: %v", r.URL.Path, domains), http.StatusNotFound)
	})
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("--bundle-endpoint-bind-address %s: %w", address, err)
	}
	srv := &http.Server{
		Handler:   onlyBodilessGets(router),
		TLSConfig: tlsconfig.TLSServerConfig(e),
		// The handshake and the headers within ReadTimeout (net/http bounds the
		// handshake by the least of these), the answer within WriteTimeout, and a
		// kept-alive connection closed after IdleTimeout: no client holds a slot
		// for longer than it uses it.
		ReadHeaderTimeout: endpointReadTimeout,
		ReadTimeout:       endpointReadTimeout,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       limits.idle,
		MaxHeaderBytes:    8 << 10,
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	klog.InfoS("Serving SPIFFE bundles", "address", listener.Addr().String(), "trustDomains", domains, "endpointID", v1alpha1.BundleEndpointID(e.first.String()),
		"refreshHint", e.refreshHint, "maxConnections", limits.maxConns, "idleTimeout", limits.idle)
	go func() {
		// Beyond maxConns, connections wait in the kernel's backlog, costing this
		// process nothing, until a slot frees (within the timeouts above).
		if err := srv.ServeTLS(netutil.LimitListener(perClient(listener, limits.maxClientConns), limits.maxConns), "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Bundle endpoint stopped")
		}
	}()
	return nil
}

// perClient closes at once a connection from a source address that holds max
// already, so that no one client can take every slot of the endpoint (the global
// limit alone let one client hold them all, and every peer wait). netutil has the
// global limit; nothing well kept has this one.
func perClient(l net.Listener, max int) net.Listener {
	return &clientLimiter{Listener: l, max: max, held: map[string]int{}}
}

type clientLimiter struct {
	net.Listener
	max  int
	mu   sync.Mutex
	held map[string]int
}

func (l *clientLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		l.mu.Lock()
		full := l.held[host] >= l.max
		if !full {
			l.held[host]++
		}
		l.mu.Unlock()
		if full {
			_ = c.Close()
			continue
		}
		return &clientConn{Conn: c, release: func() { l.release(host) }}, nil
	}
}

func (l *clientLimiter) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[host]--; l.held[host] <= 0 {
		delete(l.held, host)
	}
}

type clientConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *clientConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// onlyBodilessGets refuses anything but a GET without a body, before the
// handler runs: a bundle is fetched, never posted to, and a body would be read (or
// drained) at the client's pace.
func onlyBodilessGets(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method != http.MethodGet:
			w.Header().Set("Allow", http.MethodGet)
			w.Header().Set("Connection", "close")
			http.Error(w, fmt.Sprintf("method %s is not allowed: the bundle endpoint answers GET", r.Method), http.StatusMethodNotAllowed)
		case r.ContentLength != 0 || len(r.TransferEncoding) > 0:
			w.Header().Set("Connection", "close")
			http.Error(w, "the bundle endpoint takes no request body", http.StatusRequestEntityTooLarge)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// klogLogger passes go-spiffe's handler errors (a domain not ready yet) to klog.
type klogLogger struct{ td string }

func (l klogLogger) Debugf(format string, args ...any) {
	klog.V(4).InfoS(fmt.Sprintf(format, args...), "trustDomain", l.td)
}
func (l klogLogger) Infof(format string, args ...any) {
	klog.InfoS(fmt.Sprintf(format, args...), "trustDomain", l.td)
}
func (l klogLogger) Warnf(format string, args ...any) {
	klog.InfoS(fmt.Sprintf(format, args...), "trustDomain", l.td)
}
func (l klogLogger) Errorf(format string, args ...any) {
	klog.ErrorS(nil, fmt.Sprintf(format, args...), "trustDomain", l.td)
}

// thumbprintsAllowed runs h where SHA-1 may compute a certificate's thumbprint. A
// SPIFFE bundle is a JWK set, and go-jose, which writes it, adds each key's x5t: the
// SHA-1 of the certificate, an identifier a reader may look keys up by, not a
// signature or a hash anything is verified with. Strict FIPS 140-3 mode
// (GODEBUG=fips140=only) refuses SHA-1 for any use and would fail every request; the
// bypass covers the writing of the answer and nothing else.
func thumbprintsAllowed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fips140.WithoutEnforcement(func() { h.ServeHTTP(w, r) })
	})
}
