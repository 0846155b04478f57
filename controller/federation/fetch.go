package federation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"

	"github.com/trustsync/trustsync/federation"
)

// maxBundleBytes bounds what an endpoint may send: a bundle larger than a
// ClusterTrustBundle can hold could never be imported anyway.
const maxBundleBytes = 1 << 20

// fetchTimeout bounds one fetch, connection included.
const fetchTimeout = 30 * time.Second

// FetchError is a fetch that failed, with the Ready reason it stands for.
type FetchError struct {
	Reason string
	Err    error
}

func (e *FetchError) Error() string { return e.Err.Error() }
func (e *FetchError) Unwrap() error { return e.Err }

// Fetcher fetches a peer's bundle from its endpoint, authenticated as its profile says.
type Fetcher interface {
	// Fetch returns the peer's bundle and how many bytes the endpoint sent; trusted
	// is what authenticates an https_spiffe endpoint (the bundle held for the domain).
	Fetch(ctx context.Context, key string, spec federation.Spec, trusted *spiffebundle.Bundle) (*spiffebundle.Bundle, int, error)
	// Forget drops what is kept for key.
	Forget(key string)
}

// HTTPFetcher fetches over HTTPS with go-spiffe's TLS configuration: for https_spiffe,
// the chain must verify against the trusted bundle and carry exactly the endpoint's
// SPIFFE ID; for https_web, against WebRoots (nil: the system's). Every fetch opens
// its own connection, so it is authenticated against the trust held at that moment: a
// kept-alive connection would go on believing a certificate the operator (or the peer's
// rotation) has since withdrawn. A peer is fetched once per refresh hint at most, so a
// handshake each time costs nothing worth saving. go-spiffe's FetchBundle is not used
// as is: it reads however much an endpoint sends and parses an error page as a bundle.
type HTTPFetcher struct {
	// WebRoots authenticate https_web endpoints; nil uses the system's roots.
	WebRoots *x509.CertPool

	mu      sync.Mutex
	clients map[string]*peerClient
}

// peerClient is one peer's HTTP client; trusted is read at each handshake.
type peerClient struct {
	profile string
	id      string
	trusted atomic.Pointer[spiffebundle.Bundle]
	client  *http.Client
}

// GetX509BundleForTrustDomain serves go-spiffe's verifier the bundle held now.
func (p *peerClient) GetX509BundleForTrustDomain(td spiffeid.TrustDomain) (*x509bundle.Bundle, error) {
	b := p.trusted.Load()
	if b == nil || b.TrustDomain() != td {
		return nil, fmt.Errorf("no bundle held for trust domain %q", td)
	}
	return b.X509Bundle(), nil
}

// authError marks a failure to authenticate the endpoint, as opposed to reaching it.
type authError struct{ err error }

func (e *authError) Error() string { return e.err.Error() }
func (e *authError) Unwrap() error { return e.err }

func (f *HTTPFetcher) client(key string, spec federation.Spec) (*peerClient, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	prof := spec.BundleEndpointProfile
	if c, ok := f.clients[key]; ok && c.profile == prof.Type && c.id == prof.EndpointSPIFFEID {
		return c, nil
	}
	if f.clients == nil {
		f.clients = map[string]*peerClient{}
	}
	c := &peerClient{profile: prof.Type, id: prof.EndpointSPIFFEID}
	var cfg *tls.Config
	switch prof.Type {
	case federation.ProfileSPIFFE:
		id, err := spiffeid.FromString(prof.EndpointSPIFFEID)
		if err != nil {
			return nil, err
		}
		cfg = tlsconfig.TLSClientConfig(c, tlsconfig.AuthorizeID(id))
		verify := cfg.VerifyPeerCertificate
		cfg.VerifyPeerCertificate = func(raw [][]byte, chains [][]*x509.Certificate) error {
			if err := verify(raw, chains); err != nil {
				return &authError{err}
			}
			return nil
		}
	default:
		cfg = &tls.Config{RootCAs: f.WebRoots, MinVersion: tls.VersionTLS12}
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = cfg
	transport.DisableKeepAlives = true
	c.client = &http.Client{Transport: transport, Timeout: fetchTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("the bundle endpoint redirected; give its final URL")
		}}
	f.clients[key] = c
	return c, nil
}

// Fetch fetches and parses the peer's bundle.
func (f *HTTPFetcher) Fetch(ctx context.Context, key string, spec federation.Spec, trusted *spiffebundle.Bundle) (*spiffebundle.Bundle, int, error) {
	td, err := spiffeid.TrustDomainFromString(spec.TrustDomain)
	if err != nil {
		return nil, 0, &FetchError{federation.ReasonInvalidSpec, err}
	}
	c, err := f.client(key, spec)
	if err != nil {
		return nil, 0, &FetchError{federation.ReasonInvalidSpec, err}
	}
	c.trusted.Store(trusted)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, spec.BundleEndpointURL, http.NoBody)
	if err != nil {
		return nil, 0, &FetchError{federation.ReasonInvalidSpec, err}
	}
	resp, err := c.client.Do(req)
	if err != nil {
		var auth *authError
		var verify *tls.CertificateVerificationError
		if errors.As(err, &auth) || errors.As(err, &verify) {
			return nil, 0, &FetchError{federation.ReasonEndpointUnauthenticated, fmt.Errorf("the endpoint %s is not who it should be (%s): %w", spec.BundleEndpointURL, describeAuth(spec), unwrapURL(err))}
		}
		return nil, 0, &FetchError{federation.ReasonEndpointUnreachable, fmt.Errorf("cannot reach %s: %w", spec.BundleEndpointURL, unwrapURL(err))}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBundleBytes+1))
	n := len(body)
	switch {
	case err != nil:
		return nil, n, &FetchError{federation.ReasonEndpointUnreachable, fmt.Errorf("reading the bundle from %s: %w", spec.BundleEndpointURL, err)}
	case resp.StatusCode != http.StatusOK:
		return nil, n, &FetchError{federation.ReasonEndpointUnreachable, fmt.Errorf("%s answered HTTP %d: %s", spec.BundleEndpointURL, resp.StatusCode, excerpt(body))}
	case n > maxBundleBytes:
		return nil, n, &FetchError{federation.ReasonInvalidBundle, fmt.Errorf("%s sent more than %d bytes; a bundle that large cannot be imported", spec.BundleEndpointURL, maxBundleBytes)}
	}
	b, err := spiffebundle.Parse(td, body)
	if err == nil {
		err = federation.Check(b)
	}
	if err != nil {
		return nil, n, &FetchError{federation.ReasonInvalidBundle, fmt.Errorf("%s sent a bundle that cannot be imported: %w", spec.BundleEndpointURL, err)}
	}
	return b, n, nil
}

// Forget drops the peer's client.
func (f *HTTPFetcher) Forget(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.clients, key)
}

func describeAuth(spec federation.Spec) string {
	if spec.BundleEndpointProfile.Type == federation.ProfileSPIFFE {
		return "https_spiffe: a certificate for " + spec.BundleEndpointProfile.EndpointSPIFFEID + " issued by a CA of the bundle held for " + spec.TrustDomain
	}
	return "https_web: a certificate for the URL's host from a trusted root"
}

// unwrapURL drops net/http's `Get "url":` prefix: the message names the URL already.
func unwrapURL(err error) error {
	if u, ok := err.(interface{ Unwrap() error }); ok && strings.HasPrefix(err.Error(), "Get ") {
		return u.Unwrap()
	}
	return err
}

// excerpt is the start of an error page, on one line.
func excerpt(body []byte) string {
	s := strings.Join(strings.Fields(string(body)), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return fmt.Sprintf("%q", s)
}
