package signer

import (
	"context"
	"crypto/fips140"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/federation"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// endpointSignerWith is a signer whose CA Secret was read: its CA signs, its anchors
// (that CA's and extra) are published at sequence.
func endpointSignerWith(t *testing.T, signer string, sequence uint64, extra ...*x509.Certificate) (*endpointSigner, *CA) {
	t.Helper()
	ca, err := generateCA(context.Background(), signer, time.Now(), 365*24*time.Hour, caKeys{}, true)
	if err != nil {
		t.Fatal(err)
	}
	s := &endpointSigner{signer: signer}
	s.state.Store(&endpointState{anchors: append([]*x509.Certificate{ca.Anchor()}, extra...), sequence: sequence, ca: ca})
	return s, ca
}

// endpointOf builds the endpoint over signers already read, each given with its
// trust domain, in order.
func endpointOf(t *testing.T, hint time.Duration, signers ...any) *bundleEndpoint {
	t.Helper()
	var order []string
	tds, names := map[string]spiffeid.TrustDomain{}, map[string]string{}
	byName := map[string]*endpointSigner{}
	for i := 0; i < len(signers); i += 2 {
		s, td := signers[i].(*endpointSigner), signers[i+1].(string)
		order, tds[s.signer], names[s.signer], byName[s.signer] = append(order, s.signer), spiffeid.RequireTrustDomainFromString(td), "secret-"+s.signer, s
	}
	e, err := newBundleEndpoint(order, tds, names, nil, hint)
	if err != nil {
		t.Fatal(err)
	}
	for _, list := range e.domains {
		for i, s := range list {
			list[i] = byName[s.signer]
		}
	}
	return e
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// The endpoint serves each trust domain's bundle (its signers' anchors, the highest
// sequence, the refresh hint) over TLS with an X509-SVID that go-spiffe's own client
// authenticates as spiffe://TD/trustsync/bundle-endpoint against that very bundle.
func TestBundleEndpoint_ServesEachTrustDomainAuthenticatedByItsOwnBundle(t *testing.T) {
	a1, a1CA := endpointSignerWith(t, "example.com/a1", 100)
	a2, _ := endpointSignerWith(t, "example.com/a2", 250)
	b, bCA := endpointSignerWith(t, "example.com/b", 7)
	e := endpointOf(t, 42*time.Second, a1, "a.example", a2, "a.example", b, "b.example")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := freePort(t)
	if err := e.serve(ctx, addr, endpointLimits{maxConns: 8, maxClientConns: 8, idle: time.Second}); err != nil {
		t.Fatal(err)
	}
	tdA := spiffeid.RequireTrustDomainFromString("a.example")
	held := spiffebundle.FromX509Authorities(tdA, []*x509.Certificate{a1CA.Anchor()})
	endpointID := spiffeid.RequireFromString(v1alpha1.BundleEndpointID("a.example"))

	// The listener is up when serve returns.
	got, err := fetchBundle(ctx, tdA, "https://"+addr+"/a.example", federation.WithSPIFFEAuth(held, endpointID))
	if err != nil {
		t.Fatalf("fetch a.example: %v", err)
	}
	if n := len(got.X509Authorities()); n != 2 {
		t.Errorf("a.example holds %d authorities, want both of its signers' (2)", n)
	}
	if seq, _ := got.SequenceNumber(); seq != 250 {
		t.Errorf("sequence %d, want the highest of its signers' (250)", seq)
	}
	if hint, _ := got.RefreshHint(); hint != 42*time.Second {
		t.Errorf("refresh hint %s, want 42s", hint)
	}

	// b.example's bundle is served too, the endpoint still presenting a.example's ID.
	tdB := spiffeid.RequireTrustDomainFromString("b.example")
	gotB, err := fetchBundle(ctx, tdB, "https://"+addr+"/b.example", federation.WithSPIFFEAuth(held, endpointID))
	if err != nil {
		t.Fatalf("fetch b.example: %v", err)
	}
	if !gotB.X509Authorities()[0].Equal(bCA.Anchor()) {
		t.Error("b.example's bundle does not hold its signer's anchor")
	}

	// Another CA's bundle does not authenticate the endpoint, nor does another ID.
	_, otherCA := endpointSignerWith(t, "example.com/other", 1)
	if _, err := fetchBundle(ctx, tdA, "https://"+addr+"/a.example",
		federation.WithSPIFFEAuth(spiffebundle.FromX509Authorities(tdA, []*x509.Certificate{otherCA.Anchor()}), endpointID)); err == nil {
		t.Error("an endpoint was authenticated by a bundle that does not hold its CA")
	}
	if _, err := fetchBundle(ctx, tdA, "https://"+addr+"/a.example",
		federation.WithSPIFFEAuth(held, spiffeid.RequireFromString("spiffe://a.example/someone-else"))); err == nil {
		t.Error("an endpoint was authenticated as an ID it does not carry")
	}
	if _, err := fetchBundle(ctx, spiffeid.RequireTrustDomainFromString("c.example"), "https://"+addr+"/c.example", federation.WithSPIFFEAuth(held, endpointID)); err == nil {
		t.Error("a trust domain not served was answered")
	}
}

// The endpoint's certificate follows the signing CA: a new CA (after a rotation)
// issues a new one at once, and an unchanged CA renews it only past half its life.
func TestBundleEndpoint_CertificateFollowsTheSigningCA(t *testing.T) {
	m, _ := endpointSignerWith(t, "example.com/a", 1)
	e := endpointOf(t, time.Minute, m, "a.example")
	now := time.Now()
	clk := clocktesting.NewFakePassiveClock(now)
	e.clock = clk
	first, err := e.GetX509SVID()
	if err != nil {
		t.Fatal(err)
	}
	if id := first.ID.String(); id != "spiffe://a.example/trustsync/bundle-endpoint" {
		t.Errorf("endpoint ID %s", id)
	}
	if leaf := first.Certificates[0]; leaf.IsCA || leaf.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("endpoint certificate: CA %v, key usage %v; want a leaf for digital signature only", leaf.IsCA, leaf.KeyUsage)
	}
	again, _ := e.GetX509SVID()
	if again != first {
		t.Error("an unchanged CA re-issued the certificate before half its life")
	}
	clk.SetTime(now.Add(endpointCertLifetime/2 + time.Minute))
	renewed, _ := e.GetX509SVID()
	if renewed == first {
		t.Error("the certificate was not renewed past half its life")
	}

	next, err := generateCA(context.Background(), "example.com/a", now, 365*24*time.Hour, caKeys{}, true)
	if err != nil {
		t.Fatal(err)
	}
	m.state.Store(&endpointState{anchors: []*x509.Certificate{next.Cert}, sequence: 2, ca: next})
	rotated, _ := e.GetX509SVID()
	if err := rotated.Certificates[0].CheckSignatureFrom(next.Cert); err != nil {
		t.Errorf("after the CA changed, the endpoint certificate is not the new CA's: %v", err)
	}
}

// Until every signer of a domain has a CA, the domain is not served: half a bundle
// would make peers drop anchors.
func TestBundleEndpoint_ADomainIsNotServedBeforeEverySignerHasACA(t *testing.T) {
	ready, _ := endpointSignerWith(t, "example.com/a1", 1)
	waiting := &endpointSigner{signer: "example.com/a2"}
	e := endpointOf(t, time.Minute, ready, "a.example", waiting, "a.example")
	if _, err := e.GetBundleForTrustDomain(spiffeid.RequireTrustDomainFromString("a.example")); err == nil || !strings.Contains(err.Error(), "example.com/a2 has no CA yet") {
		t.Errorf("err = %v, want the signer that has not published named", err)
	}
}

// The endpoint answers a GET without a body alone: anything else is refused before
// the bundle is looked up, and the connection closed.
func TestBundleEndpoint_AnswersOnlyAGetWithoutABody(t *testing.T) {
	served := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("bundle")) })
	for _, tc := range []struct {
		name     string
		method   string
		body     string
		chunked  bool
		want     int
		wantSays string
	}{
		{name: "a GET is served", method: http.MethodGet, want: http.StatusOK, wantSays: "bundle"},
		{name: "a POST is refused", method: http.MethodPost, want: http.StatusMethodNotAllowed, wantSays: "method POST is not allowed"},
		{name: "a HEAD is refused", method: http.MethodHead, want: http.StatusMethodNotAllowed},
		{name: "a GET with a body is refused", method: http.MethodGet, body: "slow body", want: http.StatusRequestEntityTooLarge, wantSays: "takes no request body"},
		{name: "a GET with a chunked body is refused", method: http.MethodGet, body: "x", chunked: true, want: http.StatusRequestEntityTooLarge, wantSays: "takes no request body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/a.example", strings.NewReader(tc.body))
			if tc.body == "" {
				r.ContentLength = 0
			}
			if tc.chunked {
				r.ContentLength, r.TransferEncoding = -1, []string{"chunked"}
			}
			w := httptest.NewRecorder()
			onlyBodilessGets(served).ServeHTTP(w, r)
			if w.Code != tc.want || !strings.Contains(w.Body.String(), tc.wantSays) {
				t.Errorf("HTTP %d %q, want %d saying %q", w.Code, w.Body.String(), tc.want, tc.wantSays)
			}
			if tc.want != http.StatusOK && w.Header().Get("Connection") != "close" {
				t.Error("the connection is kept after a refusal")
			}
		})
	}
}

// No one client holds every connection of the endpoint: beyond its share, its next
// connection is closed at once, while another client's is taken, and a connection it
// closes gives its slot back.
func TestPerClient_NoClientTakesMoreThanItsShare(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := perClient(ln, 2)
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closed says whether the server closed c: a read sees the end at once.
	closed := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
	}
	take := func(what string) net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(5 * time.Second):
			t.Fatalf("%s was not accepted", what)
			return nil
		}
	}
	first, _ := dial("127.0.0.1"), dial("127.0.0.1")
	held := take("the first connection")
	take("the second connection")
	if third := dial("127.0.0.1"); !closed(third) {
		t.Error("a third connection of one client was kept beyond its share of 2")
	}
	dial("127.0.0.2")
	take("another client's connection")
	_ = first.Close()
	_ = held.Close()
	dial("127.0.0.1")
	take("a connection after the client closed one")
}

// fetchBundle is go-spiffe's federation.FetchBundle where go-jose may check the x5t
// thumbprints it reads (SHA-1, which strict FIPS 140-3 mode refuses for any use).
func fetchBundle(ctx context.Context, td spiffeid.TrustDomain, url string, opts ...federation.FetchOption) (b *spiffebundle.Bundle, err error) {
	fips140.WithoutEnforcement(func() { b, err = federation.FetchBundle(ctx, td, url, opts...) })
	return b, err
}
