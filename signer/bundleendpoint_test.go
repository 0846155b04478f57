package signer

import (
	"context"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/federation"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	clocktesting "k8s.io/utils/clock/testing"

	federationapi "github.com/trustsync/trustsync/federation"
)

// endpointManager is a signer whose CA is loaded and whose anchors are published.
func endpointManager(t *testing.T, signer string, sequence uint64, extra ...*x509.Certificate) *caManager {
	t.Helper()
	ca, err := generateCA(signer, time.Now(), 365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	m := &caManager{signer: signer}
	m.current.Store(ca)
	m.published.Store(&publishedAnchors{anchors: append([]*x509.Certificate{ca.Anchor()}, extra...), sequence: sequence})
	return m
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
	a1 := endpointManager(t, "example.com/a1", 100)
	a2 := endpointManager(t, "example.com/a2", 250)
	b := endpointManager(t, "example.com/b", 7)
	e, err := newBundleEndpoint([]string{"example.com/a1", "example.com/a2", "example.com/b"},
		map[string]string{"example.com/a1": "a.example", "example.com/a2": "a.example", "example.com/b": "b.example"},
		map[string]*caManager{"example.com/a1": a1, "example.com/a2": a2, "example.com/b": b}, 42*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := freePort(t)
	if err := e.serve(ctx, addr); err != nil {
		t.Fatal(err)
	}
	tdA := spiffeid.RequireTrustDomainFromString("a.example")
	held := spiffebundle.FromX509Authorities(tdA, []*x509.Certificate{a1.signingCA().Anchor()})
	endpointID := spiffeid.RequireFromString(federationapi.EndpointID("a.example"))

	var got *spiffebundle.Bundle
	for range 50 { // the listener is up before serve returns; TLS may take a moment on a busy machine
		if got, err = federation.FetchBundle(ctx, tdA, "https://"+addr+"/a.example", federation.WithSPIFFEAuth(held, endpointID)); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	gotB, err := federation.FetchBundle(ctx, tdB, "https://"+addr+"/b.example", federation.WithSPIFFEAuth(held, endpointID))
	if err != nil {
		t.Fatalf("fetch b.example: %v", err)
	}
	if !gotB.X509Authorities()[0].Equal(b.signingCA().Anchor()) {
		t.Error("b.example's bundle does not hold its signer's anchor")
	}

	// Another CA's bundle does not authenticate the endpoint, nor does another ID.
	other := endpointManager(t, "example.com/other", 1)
	if _, err := federation.FetchBundle(ctx, tdA, "https://"+addr+"/a.example",
		federation.WithSPIFFEAuth(spiffebundle.FromX509Authorities(tdA, []*x509.Certificate{other.signingCA().Anchor()}), endpointID)); err == nil {
		t.Error("an endpoint was authenticated by a bundle that does not hold its CA")
	}
	if _, err := federation.FetchBundle(ctx, tdA, "https://"+addr+"/a.example",
		federation.WithSPIFFEAuth(held, spiffeid.RequireFromString("spiffe://a.example/someone-else"))); err == nil {
		t.Error("an endpoint was authenticated as an ID it does not carry")
	}
	if _, err := federation.FetchBundle(ctx, spiffeid.RequireTrustDomainFromString("c.example"), "https://"+addr+"/c.example", federation.WithSPIFFEAuth(held, endpointID)); err == nil {
		t.Error("a trust domain not served was answered")
	}
}

// The endpoint's certificate follows the signing CA: a new CA (after a rotation)
// issues a new one at once, and an unchanged CA renews it only past half its life.
func TestBundleEndpoint_CertificateFollowsTheSigningCA(t *testing.T) {
	m := endpointManager(t, "example.com/a", 1)
	e, err := newBundleEndpoint([]string{"example.com/a"}, map[string]string{"example.com/a": "a.example"}, map[string]*caManager{"example.com/a": m}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
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

	next, err := generateCA("example.com/a", now, 365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	m.current.Store(next)
	rotated, _ := e.GetX509SVID()
	if err := rotated.Certificates[0].CheckSignatureFrom(next.Cert); err != nil {
		t.Errorf("after the CA changed, the endpoint certificate is not the new CA's: %v", err)
	}
}

// Until every signer of a domain has published, the domain is not served: half a
// bundle would make peers drop anchors.
func TestBundleEndpoint_ADomainIsNotServedBeforeEverySignerPublished(t *testing.T) {
	ready := endpointManager(t, "example.com/a1", 1)
	waiting := &caManager{signer: "example.com/a2"}
	e, err := newBundleEndpoint([]string{"example.com/a1", "example.com/a2"}, map[string]string{"example.com/a1": "a.example", "example.com/a2": "a.example"},
		map[string]*caManager{"example.com/a1": ready, "example.com/a2": waiting}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.GetBundleForTrustDomain(spiffeid.RequireTrustDomainFromString("a.example")); err == nil || !strings.Contains(err.Error(), "example.com/a2 has not published") {
		t.Errorf("err = %v, want the signer that has not published named", err)
	}
}
