package federation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/test/fixtures"
)

// A peer is fetched at its hint within the bounds, sooner after failures with a
// backoff that never exceeds the hint, never again for a spec that cannot work, and
// always with jitter of at most 10%.
func TestSchedule_HintWithinBoundsBackoffBelowTheHintNeverForABadSpec(t *testing.T) {
	c := &Controller{cfg: Config{MinRefresh: MinRefresh}}
	now := time.Unix(1_800_000_000, 0)
	within := func(got time.Time, want time.Duration) bool {
		d := got.Sub(now)
		return d >= want-want/10 && d <= want+want/10
	}
	for _, tc := range []struct {
		name     string
		results  []result
		want     time.Duration
		never    bool
		failures int
	}{
		{"the peer's hint", []result{{ok: true, refreshHint: 2 * time.Minute}}, 2 * time.Minute, false, 0},
		{"no hint: the default", []result{{ok: true}}, DefaultRefresh, false, 0},
		{"a hint of 0 is no hint: the default, not the floor", []result{{ok: true, refreshHint: time.Minute}, {ok: true, refreshHint: 0}}, DefaultRefresh, false, 0},
		{"a hint under the floor", []result{{ok: true, refreshHint: time.Second}}, MinRefresh, false, 0},
		{"a hint over the ceiling", []result{{ok: true, refreshHint: 24 * time.Hour}}, MaxRefresh, false, 0},
		{"first failure: the floor", []result{{reason: v1alpha1.ReasonEndpointUnreachable}}, MinRefresh, false, 1},
		{"third failure: four times the floor", []result{{reason: "x"}, {reason: "x"}, {reason: "x"}}, 4 * MinRefresh, false, 3},
		{"many failures: never beyond the default refresh", make([]result, 20), DefaultRefresh, false, 20},
		{"a success resets the backoff", []result{{reason: "x"}, {reason: "x"}, {ok: true, refreshHint: time.Minute}}, time.Minute, false, 0},
		{"failures after a success back off up to its hint", []result{{ok: true, refreshHint: 20 * time.Second}, {reason: "x"}, {reason: "x"}, {reason: "x"}}, 20 * time.Second, false, 3},
		{"a spec that cannot work: not until it changes", []result{{reason: v1alpha1.ReasonInvalidSpec}}, 0, true, 0},
		{"a conflict: not until it changes", []result{{reason: v1alpha1.ReasonConflict, conflictFinal: true}}, 0, true, 0},
	} {
		p := &peer{}
		for _, r := range tc.results {
			if r.reason == "" && !r.ok {
				r.reason = v1alpha1.ReasonEndpointUnreachable
			}
			c.schedule(p, r, now)
		}
		switch {
		case tc.never && !p.next.IsZero():
			t.Errorf("%s: next fetch at %s, want none", tc.name, p.next.Sub(now))
		case !tc.never && !within(p.next, tc.want):
			t.Errorf("%s: next fetch in %s, want %s ±10%%", tc.name, p.next.Sub(now), tc.want)
		case p.failures != tc.failures:
			t.Errorf("%s: %d failures counted, want %d", tc.name, p.failures, tc.failures)
		}
	}
}

// A peer may only speak for its own trust domain: an authority naming another
// (a CA with a spiffe:// URI SAN, as SPIRE's carry) is refused.
func TestCheckDomain_AnAuthorityOfAnotherTrustDomainIsRefused(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("b.example")
	ca := func(uri string) *x509.Certificate {
		o := fixtures.Options{CommonName: uri}
		if uri != "" {
			u, _ := url.Parse(uri)
			o.URIs = []*url.URL{u}
		}
		return fixtures.MustNew(o).Cert
	}
	for _, tc := range []struct {
		name  string
		certs []*x509.Certificate
		ok    bool
	}{
		{"no URI", []*x509.Certificate{ca("")}, true},
		{"its own trust domain", []*x509.Certificate{ca("spiffe://b.example")}, true},
		{"a URI of another scheme", []*x509.Certificate{ca("https://evil.example")}, true},
		{"another trust domain among good ones", []*x509.Certificate{ca(""), ca("spiffe://evil.example")}, false},
	} {
		err := checkDomain(td, spiffebundle.FromX509Authorities(td, tc.certs))
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
		if err != nil && !strings.Contains(err.Error(), "evil.example") {
			t.Errorf("%s: %v does not name the offending trust domain", tc.name, err)
		}
	}
}

// The fetcher says why a fetch failed in the reason the status carries: an endpoint
// that is not who it should be is not merely unreachable.
func TestHTTPFetcher_ClassifiesWhatWentWrong(t *testing.T) {
	td := "b.example"
	good := fixtures.CA("b")
	endpointID, _ := url.Parse(v1alpha1.BundleEndpointID(td))
	doc := func() []byte {
		b := spiffebundle.FromX509Authorities(spiffeid.RequireTrustDomainFromString(td), []*x509.Certificate{good.Cert})
		b.SetSequenceNumber(3)
		d, _ := fixtures.SPIFFEBundleJSON(b)
		return d
	}()
	serve := func(ca *fixtures.Cert, uri *url.URL, h http.HandlerFunc) string {
		leaf := fixtures.MustNew(fixtures.Options{Leaf: true, URIs: []*url.URL{uri}, Parent: ca})
		s := httptest.NewUnstartedServer(h)
		s.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Cert.Raw}, PrivateKey: leaf.Key}}}
		s.StartTLS()
		t.Cleanup(s.Close)
		return s.URL + "/" + td
	}
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(doc) }
	other, _ := url.Parse("spiffe://b.example/not-the-endpoint")
	spec := func(u string) *v1alpha1.ParsedFederatedTrustDomainSpec {
		parsed, err := v1alpha1.ParseFederatedTrustDomainSpec(&v1alpha1.FederatedTrustDomainSpec{TrustDomain: td, BundleEndpointURL: u, TrustDomainBundle: string(doc),
			BundleEndpointProfile: v1alpha1.BundleEndpointProfile{Type: v1alpha1.ProfileSPIFFE, EndpointSPIFFEID: endpointID.String()}})
		if err != nil {
			t.Fatal(err)
		}
		return parsed
	}
	trusted := spiffebundle.FromX509Authorities(spiffeid.RequireTrustDomainFromString(td), []*x509.Certificate{good.Cert})
	for _, tc := range []struct {
		name, url, reason string
	}{
		{"the endpoint", serve(good, endpointID, ok), ""},
		{"an impostor's CA", serve(fixtures.CA("impostor"), endpointID, ok), v1alpha1.ReasonEndpointUnauthenticated},
		{"the right CA, another ID", serve(good, other, ok), v1alpha1.ReasonEndpointUnauthenticated},
		{"an error page", serve(good, endpointID, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusNotFound) }), v1alpha1.ReasonEndpointUnreachable},
		{"a redirect", serve(good, endpointID, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://elsewhere.example/", http.StatusFound)
		}), v1alpha1.ReasonEndpointUnreachable},
		{"not a bundle", serve(good, endpointID, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}")) }), v1alpha1.ReasonInvalidBundle},
		{"nobody there", "https://127.0.0.1:1/" + td, v1alpha1.ReasonEndpointUnreachable},
	} {
		f := &HTTPFetcher{}
		b, _, err := f.Fetch(context.Background(), tc.name, spec(tc.url), trusted)
		var fe *FetchError
		switch {
		case tc.reason == "" && (err != nil || len(b.X509Authorities()) != 1):
			t.Errorf("%s: %v", tc.name, err)
		case tc.reason != "" && (!errors.As(err, &fe) || fe.Reason != tc.reason):
			t.Errorf("%s: %v, want reason %s", tc.name, err, tc.reason)
		}
	}
}

// A status whose only change is lastRefreshed waits a minute before it is written
// again; any other change is written at once.
func TestOnlyRefreshedRecently_ThrottlesLastRefreshedAlone(t *testing.T) {
	at := func(s int) *metav1.Time { v := metav1.NewTime(time.Unix(1_800_000_000+int64(s), 0)); return &v }
	seq := func(n uint64) *uint64 { return &n }
	old := v1alpha1.FederatedTrustDomainStatus{Sequence: seq(1), LastRefreshed: at(0), Anchors: []string{"a"}}
	for _, tc := range []struct {
		name string
		new  v1alpha1.FederatedTrustDomainStatus
		skip bool
	}{
		{"refreshed 10 s later, nothing else", v1alpha1.FederatedTrustDomainStatus{Sequence: seq(1), LastRefreshed: at(10), Anchors: []string{"a"}}, true},
		{"refreshed a minute later", v1alpha1.FederatedTrustDomainStatus{Sequence: seq(1), LastRefreshed: at(60), Anchors: []string{"a"}}, false},
		{"the sequence moved", v1alpha1.FederatedTrustDomainStatus{Sequence: seq(2), LastRefreshed: at(10), Anchors: []string{"a"}}, false},
		{"the anchors changed", v1alpha1.FederatedTrustDomainStatus{Sequence: seq(1), LastRefreshed: at(10), Anchors: []string{"a", "b"}}, false},
	} {
		if got := onlyRefreshedRecently(old, tc.new); got != tc.skip {
			t.Errorf("%s: skipped %v, want %v", tc.name, got, tc.skip)
		}
	}
}

// A message from what a peer sent is cut to what a status holds, saying so, and never
// in the middle of a character.
func TestBounded_CutsLongMessagesSayingHowMuch(t *testing.T) {
	for _, tc := range []struct {
		name, msg, want string
	}{
		{"a short message is kept", "refused", "refused"},
		{"exactly the bound is kept", strings.Repeat("a", maxMessage), strings.Repeat("a", maxMessage)},
		{"a longer one is cut and says how much", strings.Repeat("a", maxMessage+10), strings.Repeat("a", maxMessage) + "... (10 more bytes cut)"},
		{"a character across the bound is not split", strings.Repeat("a", maxMessage-1) + "é", strings.Repeat("a", maxMessage-1) + "... (2 more bytes cut)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := bounded(tc.msg); got != tc.want {
				t.Errorf("bounded: %d bytes ending %q, want %d ending %q", len(got), got[max(0, len(got)-30):], len(tc.want), tc.want[max(0, len(tc.want)-30):])
			}
		})
	}
}
