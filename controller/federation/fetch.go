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

	"github.com/trustsync/trustsync/api/v1alpha1"
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
	Fetch(ctx context.Context, key string, spec *v1alpha1.ParsedFederatedTrustDomainSpec, trusted *spiffebundle.Bundle) (*spiffebundle.Bundle, int, error)
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
	id      spiffeid.ID
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

func (f *HTTPFetcher) client(key string, spec *v1alpha1.ParsedFederatedTrustDomainSpec) *peerClient {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.clients[key]; ok && c.profile == spec.Profile && c.id == spec.EndpointID {
		return c
	}
	if f.clients == nil {
		f.clients = map[string]*peerClient{}
	}
	c := &peerClient{profile: spec.Profile, id: spec.EndpointID}
	var cfg *tls.Config
	switch spec.Profile {
	case v1alpha1.ProfileSPIFFE:
		cfg = tlsconfig.TLSClientConfig(c, tlsconfig.AuthorizeID(spec.EndpointID))
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
	return c
}

// Fetch fetches and parses the peer's bundle.
func (f *HTTPFetcher) Fetch(ctx context.Context, key string, spec *v1alpha1.ParsedFederatedTrustDomainSpec, trusted *spiffebundle.Bundle) (*spiffebundle.Bundle, int, error) {
	td := spec.TrustDomain
	c := f.client(key, spec)
	c.trusted.Store(trusted)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, spec.EndpointURL.String(), http.NoBody)
	if err != nil {
		return nil, 0, &FetchError{v1alpha1.ReasonInvalidSpec, err}
	}
	resp, err := c.client.Do(req)
	if err != nil {
		var auth *authError
		var verify *tls.CertificateVerificationError
		if errors.As(err, &auth) || errors.As(err, &verify) {
			return nil, 0, &FetchError{v1alpha1.ReasonEndpointUnauthenticated, fmt.Errorf("the endpoint %s is not who it should be (%s): %w", spec.EndpointURL.String(), describeAuth(spec), unwrapURL(err))}
		}
		return nil, 0, &FetchError{v1alpha1.ReasonEndpointUnreachable, fmt.Errorf("cannot reach %s: %w", spec.EndpointURL.String(), unwrapURL(err))}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBundleBytes+1))
	n := len(body)
	switch {
	case err != nil:
		return nil, n, &FetchError{v1alpha1.ReasonEndpointUnreachable, fmt.Errorf("reading the bundle from %s: %w", spec.EndpointURL.String(), err)}
	case resp.StatusCode != http.StatusOK:
		return nil, n, &FetchError{v1alpha1.ReasonEndpointUnreachable, fmt.Errorf("%s answered HTTP %d: %s", spec.EndpointURL.String(), resp.StatusCode, excerpt(body))}
	case n > maxBundleBytes:
		return nil, n, &FetchError{v1alpha1.ReasonInvalidBundle, fmt.Errorf("%s sent more than %d bytes; a bundle that large cannot be imported", spec.EndpointURL.String(), maxBundleBytes)}
	}
	b, err := v1alpha1.ParseSPIFFEBundleJSON(td, body)
	if err == nil {
		err = v1alpha1.CheckFederatedBundle(b)
	}
	if err != nil {
		return nil, n, &FetchError{v1alpha1.ReasonInvalidBundle, fmt.Errorf("%s sent a bundle that cannot be imported: %w", spec.EndpointURL.String(), err)}
	}
	return b, n, nil
}

// Forget drops the peer's client.
func (f *HTTPFetcher) Forget(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.clients, key)
}

func describeAuth(spec *v1alpha1.ParsedFederatedTrustDomainSpec) string {
	if spec.Profile == v1alpha1.ProfileSPIFFE {
		return "https_spiffe: a certificate for " + spec.EndpointID.String() + " issued by a CA of the bundle held for " + spec.TrustDomain.String()
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
