package federation

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	gospiffefederation "github.com/spiffe/go-spiffe/v2/federation"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/cmd/kubectl-trustsync/plugin"
	"github.com/trustsync/trustsync/signer"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// A imports B's CA through B's bundle endpoint, authenticated https_spiffe; a
// certificate B's signer issued verifies against A's imported bundle; B rotates its CA
// and A holds the new anchor before B's new CA signs, with no one touching A.
func TestFederation_AImportsBAndFollowsItsRotationBeforeTheNewCASigns(t *testing.T) {
	c := start(t)
	live := c.liveB(t)
	standby := c.standby(t)
	c.create(t, c.peer("cluster-b", "https://"+c.endpoint+"/"+tdB, live.Spec.TrustBundle))

	c.waitImported(t, "cluster-b")
	imp := c.imported(t)
	if imp.Spec.SignerName != v1alpha1.FederatedSignerName || imp.Labels[v1alpha1.TrustDomainLabel] != tdB {
		t.Errorf("imported bundle: signer %q, labels %v; want %s and %s=%s", imp.Spec.SignerName, imp.Labels, v1alpha1.FederatedSignerName, v1alpha1.TrustDomainLabel, tdB)
	}
	if owner := metav1.GetControllerOf(imp); owner == nil || owner.Kind != v1alpha1.FederatedTrustDomainKind || owner.Name != "cluster-b" {
		t.Errorf("imported bundle's controller = %v, want the FederatedTrustDomain (so deleting it deletes the bundle)", owner)
	}
	if got, want := anchorIDs(t, imp.Spec.TrustBundle), anchorIDs(t, live.Spec.TrustBundle); !slices.Equal(got, want) {
		t.Errorf("A holds %v, B publishes %v", got, want)
	}
	if err := fixtures.VerifyAgainst(endpointCertificate(t, c.endpoint), imp.Spec.TrustBundle); err != nil {
		t.Errorf("a certificate B's signer issued does not verify against A's imported bundle: %v", err)
	}
	first := c.status(t, "cluster-b")
	// The standby replica serves the same bundle at the same sequence: peers see one
	// bundle whichever replica a Service sends them to.
	fromStandby := fetch(t, standby, live.Spec.TrustBundle)
	if seq, _ := fromStandby.SequenceNumber(); seq != *first.Sequence || !slices.Equal(v1alpha1.BundleAnchors(fromStandby), first.Anchors) {
		t.Errorf("the standby serves %v at sequence %d; the leader served %v at %d", v1alpha1.BundleAnchors(fromStandby), seq, first.Anchors, *first.Sequence)
	}
	// The operator's answer: Ready, the sequence, the anchors (no pods select it yet,
	// so none are behind: exit 0).
	var peer plugin.Peer
	controlplane.NewPlugin(t, c.a).JSON(t, &peer, 0, "federation", tdB)
	if peer.Ready != "True" || peer.Sequence == nil || *peer.Sequence != *first.Sequence || !slices.Equal(peer.Anchors, first.Anchors) || peer.Bundle != v1alpha1.FederatedBundleName(tdB) {
		t.Errorf("kubectl trustsync federation %s = %+v, want Ready with the status's sequence %d and anchors %v", tdB, peer, *first.Sequence, first.Anchors)
	}

	// B rotates. Nobody touches A.
	c.rotateB(t)
	var next string
	poll.Eventually(t, time.Minute, "B publishes its next CA", func() (bool, string) {
		ids := anchorIDs(t, c.liveB(t).Spec.TrustBundle)
		for _, id := range ids {
			if !slices.Contains(first.Anchors, id) {
				next = id
				return true, ""
			}
		}
		return false, "B's live bundle still holds only " + strings.Join(ids, ",")
	})
	published := time.Now()
	var importedAt time.Time
	poll.Eventually(t, window, "A holds B's next anchor", func() (bool, string) {
		imp := c.imported(t)
		if imp != nil && slices.Contains(anchorIDs(t, imp.Spec.TrustBundle), next) {
			importedAt = time.Now()
			return true, ""
		}
		return false, "A's status: " + strings.Join(c.status(t, "cluster-b").Anchors, ",")
	})
	// B's new CA has not signed yet: its endpoint still presents the old CA's
	// certificate, and its Secret says it waits.
	if phase := c.phaseB(t); phase != string(signer.PhaseWaiting) {
		t.Fatalf("when A held the next anchor (%.1f s after B published it), B's rotation was %s, want still %s: A followed too late", importedAt.Sub(published).Seconds(), phase, signer.PhaseWaiting)
	}
	t.Logf("A held B's next anchor %.1f s after B published it; B's new CA signs no sooner than %s after", importedAt.Sub(published).Seconds(), window)
	s := c.status(t, "cluster-b")
	if s.Sequence == nil || *s.Sequence <= *first.Sequence {
		t.Errorf("sequence %v after the rotation, was %d: it must move forward", s.Sequence, *first.Sequence)
	}
	if !slices.ContainsFunc(c.events(t, "cluster-b"), func(e corev1.Event) bool { return e.Reason == "BundleImported" && strings.Contains(e.Message, next) }) {
		t.Error("no BundleImported Event names the new anchor")
	}

	// B's new CA signs; its endpoint now presents a certificate from it, which A
	// authenticates with the anchor it imported, and keeps refreshing.
	poll.Eventually(t, window+30*time.Second, "B's new CA signs", func() (bool, string) {
		cert := endpointCertificate(t, c.endpoint)
		return bundle.AnchorID(issuerOf(t, c, cert)) == next, "the endpoint's certificate is still the old CA's"
	})
	switched := time.Now()
	// lastRefreshed is recorded at most once a minute when nothing else changes.
	poll.Eventually(t, 90*time.Second, "A refreshes from the endpoint of B's new CA", func() (bool, string) {
		s := c.status(t, "cluster-b")
		st, reason, msg := ready(s)
		return st == metav1.ConditionTrue && s.LastRefreshed != nil && s.LastRefreshed.Time.After(switched.Add(-time.Second)), string(st) + " " + reason + ": " + msg
	})
	if err := fixtures.VerifyAgainst(endpointCertificate(t, c.endpoint), c.imported(t).Spec.TrustBundle); err != nil {
		t.Errorf("a certificate B's new CA issued does not verify against A's imported bundle: %v", err)
	}
}

// fetch reads B's bundle from the endpoint at addr as a peer would, trusting trustPEM.
func fetch(t *testing.T, addr, trustPEM string) *spiffebundle.Bundle {
	t.Helper()
	td := spiffeid.RequireTrustDomainFromString(tdB)
	held, err := v1alpha1.ParseSPIFFEBundle(td, []byte(trustPEM))
	if err != nil {
		t.Fatal(err)
	}
	var b *spiffebundle.Bundle
	poll.Eventually(t, 30*time.Second, "the endpoint at "+addr+" answers", func() (bool, string) {
		b, err = gospiffefederation.FetchBundle(context.Background(), td, "https://"+addr+"/"+tdB, gospiffefederation.WithSPIFFEAuth(held, spiffeid.RequireFromString(v1alpha1.BundleEndpointID(tdB))))
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return b
}

// rotateB asks B's signer to rotate its CA now, as an operator would.
func (c *clusters) rotateB(t *testing.T) {
	t.Helper()
	patch := `{"metadata":{"annotations":{"` + signer.AnnotationRotateRequested + `":"` + time.Now().UTC().Format(time.RFC3339Nano) + `"}}}`
	if _, err := kube(t, c.b).CoreV1().Secrets(namespace).Patch(context.Background(), "trustsync-ca-trustsync.io-workload", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// phaseB is where B's CA rotation stands.
func (c *clusters) phaseB(t *testing.T) string {
	t.Helper()
	secret, err := kube(t, c.b).CoreV1().Secrets(namespace).Get(context.Background(), "trustsync-ca-trustsync.io-workload", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return secret.Annotations[signer.AnnotationPhase]
}

// issuerOf finds which of B's published anchors signed cert.
func issuerOf(t *testing.T, c *clusters, cert *x509.Certificate) []byte {
	t.Helper()
	anchors, err := bundle.ParseCertificates([]byte(c.liveB(t).Spec.TrustBundle))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range anchors {
		if cert.CheckSignatureFrom(a) == nil {
			return a.Raw
		}
	}
	return nil
}

// endpoint is a bundle endpoint under the test's control, presenting a certificate
// for spiffe://b.example/trustsync/bundle-endpoint from the given CA.
type endpoint struct {
	url     string
	mu      sync.Mutex
	respond func(w http.ResponseWriter)
}

func serveEndpoint(t *testing.T, caCert *x509.Certificate, caKey any) *endpoint {
	t.Helper()
	id, _ := url.Parse(v1alpha1.BundleEndpointID(tdB))
	leaf := fixtures.MustNew(fixtures.Options{Leaf: true, URIs: []*url.URL{id}, Parent: &fixtures.Cert{Cert: caCert, Key: caKey.(crypto.Signer)}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &endpoint{url: "https://" + l.Addr().String() + "/" + tdB}
	srv := &http.Server{
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Cert.Raw}, PrivateKey: leaf.Key}}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			e.mu.Lock()
			respond := e.respond
			e.mu.Unlock()
			respond(w)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return e
}

func (e *endpoint) set(respond func(w http.ResponseWriter)) {
	e.mu.Lock()
	e.respond = respond
	e.mu.Unlock()
}

func bundleDoc(t *testing.T, seq uint64, authorities ...*x509.Certificate) func(http.ResponseWriter) {
	b := spiffebundle.FromX509Authorities(spiffeid.RequireTrustDomainFromString(tdB), authorities)
	b.SetSequenceNumber(seq)
	b.SetRefreshHint(time.Second)
	doc, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return func(w http.ResponseWriter) { _, _ = w.Write(doc) }
}

// bundleDocWithoutSequence is a bundle document with no spiffe_sequence.
func bundleDocWithoutSequence(t *testing.T, authorities ...*x509.Certificate) func(http.ResponseWriter) {
	doc, err := spiffebundle.FromX509Authorities(spiffeid.RequireTrustDomainFromString(tdB), authorities).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return func(w http.ResponseWriter) { _, _ = w.Write(doc) }
}

// Nothing a peer's endpoint sends makes A's imported bundle worse: an impostor whose
// certificate B's bundle does not sign, a bundle signed for but going back in
// sequence (or carrying none), empty, naming another trust domain, garbage,
// oversized, more anchors than the status can name, an error longer than a status
// holds, a breakable key, an error page, or no answer at all: each leaves A's anchors
// as they were, the bundle unwritten, and says why on the status and in an Event.
// Pointed back at B, it recovers.
func TestFederation_NothingAnEndpointSendsMakesTheImportWorse(t *testing.T) {
	c := start(t)
	live := c.liveB(t)
	good := "https://" + c.endpoint + "/" + tdB
	c.create(t, c.peer("guarded-b", good, live.Spec.TrustBundle))
	c.waitImported(t, "guarded-b")
	held := c.status(t, "guarded-b")
	heldPEM, heldVersion := c.imported(t).Spec.TrustBundle, c.imported(t).ResourceVersion

	caCert, caKey := c.caOf(t)
	bAnchors, err := bundle.ParseCertificates([]byte(live.Spec.TrustBundle))
	if err != nil {
		t.Fatal(err)
	}
	extra := fixtures.CA("an anchor B never published").Cert
	evilURI, _ := url.Parse("spiffe://evil.example")
	otherDomain := fixtures.MustNew(fixtures.Options{CommonName: "evil.example CA", URIs: []*url.URL{evilURI}}).Cert
	impostorCA := fixtures.CA("impostor")

	misbehaving := serveEndpoint(t, caCert, caKey)
	impostor := serveEndpoint(t, impostorCA.Cert, impostorCA.Key)
	impostor.set(bundleDoc(t, *held.Sequence+1, impostorCA.Cert))
	many := make([]*x509.Certificate, 0, 1100)
	for range 1100 {
		many = append(many, fixtures.CA("one of 1,100").Cert)
	}
	leaves := make([]*x509.Certificate, 0, 600)
	for range 600 {
		leaves = append(leaves, fixtures.MustNew(fixtures.Options{Leaf: true}).Cert)
	}
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedURL := "https://" + closed.Addr().String() + "/" + tdB
	closed.Close()

	for _, tc := range []struct {
		name, url, reason, says string
		respond                 func(http.ResponseWriter)
	}{
		{"an impostor B's bundle does not sign", impostor.url, v1alpha1.ReasonEndpointUnauthenticated, "is not who it should be", nil},
		{"the sequence goes back", misbehaving.url, v1alpha1.ReasonSequenceRegressed, "went back", bundleDoc(t, *held.Sequence-1, append(bAnchors, extra)...)},
		{"the sequence stays though the anchors change", misbehaving.url, v1alpha1.ReasonSequenceRegressed, "did not move", bundleDoc(t, *held.Sequence, extra)},
		{"an empty bundle", misbehaving.url, v1alpha1.ReasonInvalidBundle, "no X.509 authority", func(w http.ResponseWriter) {
			_, _ = w.Write([]byte(`{"keys":[],"spiffe_sequence":` + jsonNumber(*held.Sequence+5) + `}`))
		}},
		{"an authority of another trust domain", misbehaving.url, v1alpha1.ReasonInvalidBundle, "evil.example", bundleDoc(t, *held.Sequence+6, append(bAnchors, otherDomain)...)},
		{"garbage", misbehaving.url, v1alpha1.ReasonInvalidBundle, "cannot be imported", func(w http.ResponseWriter) { _, _ = w.Write([]byte("<html>hello</html>")) }},
		{"two megabytes", misbehaving.url, v1alpha1.ReasonInvalidBundle, "more than 1048576 bytes", func(w http.ResponseWriter) { _, _ = w.Write([]byte(strings.Repeat(" ", 2<<20))) }},
		{"an error page", misbehaving.url, v1alpha1.ReasonEndpointUnreachable, "HTTP 503", func(w http.ResponseWriter) { http.Error(w, "maintenance", http.StatusServiceUnavailable) }},
		{"no answer at all", closedURL, v1alpha1.ReasonEndpointUnreachable, "cannot reach", nil},
		{"more anchors than the status can name", misbehaving.url, v1alpha1.ReasonInvalidBundle, "holds 1100 X.509 authorities; at most 1024", bundleDoc(t, *held.Sequence+7, many...)},
		{"an error longer than a status holds", misbehaving.url, v1alpha1.ReasonInvalidBundle, "more bytes cut)", bundleDoc(t, *held.Sequence+8, leaves...)},
		{"a breakable RSA authority", misbehaving.url, v1alpha1.ReasonInvalidBundle, "1024-bit RSA key", bundleDoc(t, *held.Sequence+9, append(bAnchors, weakRSACA(t))...)},
		{"no sequence and other anchors", misbehaving.url, v1alpha1.ReasonSequenceRegressed, "carries no spiffe_sequence", bundleDocWithoutSequence(t, extra)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.respond != nil {
				misbehaving.set(tc.respond)
			}
			c.setURL(t, "guarded-b", tc.url)
			poll.Eventually(t, 30*time.Second, "refused with "+tc.reason, func() (bool, string) {
				st, reason, msg := ready(c.status(t, "guarded-b"))
				return st == metav1.ConditionFalse && reason == tc.reason && strings.Contains(msg, tc.says), string(st) + " " + reason + ": " + msg
			})
			s := c.status(t, "guarded-b")
			if !slices.Equal(s.Anchors, held.Anchors) || *s.Sequence != *held.Sequence {
				t.Errorf("status anchors %v sequence %d, want those held: %v %d", s.Anchors, *s.Sequence, held.Anchors, *held.Sequence)
			}
			if got := c.imported(t); got == nil || got.Spec.TrustBundle != heldPEM || got.ResourceVersion != heldVersion {
				t.Error("the imported bundle was written again")
			}
			if !slices.ContainsFunc(c.events(t, "guarded-b"), func(e corev1.Event) bool { return e.Reason == tc.reason && e.Type == "Warning" }) {
				t.Errorf("no Warning Event %s", tc.reason)
			}
			c.setURL(t, "guarded-b", good)
			poll.Eventually(t, 30*time.Second, "back at B", func() (bool, string) {
				st, reason, msg := ready(c.status(t, "guarded-b"))
				return st == metav1.ConditionTrue, string(st) + " " + reason + ": " + msg
			})
		})
	}
}

// An imported bundle deleted, or edited by someone else, is written again as the
// peer's at once, not at the next refresh.
func TestFederation_AnImportedBundleDeletedOrEditedIsRestored(t *testing.T) {
	c := start(t)
	live := c.liveB(t)
	c.create(t, c.peer("restored-b", "https://"+c.endpoint+"/"+tdB, live.Spec.TrustBundle))
	c.waitImported(t, "restored-b")
	want := c.imported(t).Spec.TrustBundle
	store := bundleapi.NewStore(dyn(t, c.a), bundle.NativeV1)
	if err := store.Delete(context.Background(), v1alpha1.FederatedBundleName(tdB), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, "the deleted bundle restored", func() (bool, string) {
		b := c.imported(t)
		return b != nil && b.Spec.TrustBundle == want, "not yet"
	})
	edited := c.imported(t)
	edited.Spec.TrustBundle = fixtures.Bundle(fixtures.CA("slipped in"))
	if _, err := store.Update(context.Background(), edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, "the edited bundle restored", func() (bool, string) {
		b := c.imported(t)
		return b != nil && b.Spec.TrustBundle == want, "not yet"
	})
}

// setURL points a FederatedTrustDomain at another endpoint.
func (c *clusters) setURL(t *testing.T, name, url string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"bundleEndpointURL": url}})
	if _, err := dyn(t, c.a).Resource(v1alpha1.FederatedTrustDomainResource).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func jsonNumber(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// The API server refuses a FederatedTrustDomain that cannot work, saying why, before
// any controller sees it; and a trust domain, which names the imported bundle, never
// changes.
func TestFederation_TheAPIServerRefusesWhatCannotWork(t *testing.T) {
	a := planes.Get(t, true)
	ftds := dyn(t, a).Resource(v1alpha1.FederatedTrustDomainResource)
	c := &clusters{a: a}
	base := func(name string) map[string]any {
		u := c.peer(name, "https://signer.b.example:8443/"+tdB, fixtures.Bundle(fixtures.CA("refused")))
		return u.Object
	}
	for _, tc := range []struct {
		name   string
		change func(spec map[string]any)
		says   string
	}{
		{"plain http", func(s map[string]any) { s["bundleEndpointURL"] = "http://signer.b.example/b.example" }, "spec.bundleEndpointURL"},
		{"https_spiffe without a bundle", func(s map[string]any) { delete(s, "trustDomainBundle") }, "https_spiffe authenticates the endpoint with the peer's bundle"},
		{"an endpoint ID with https_web", func(s map[string]any) {
			s["bundleEndpointProfile"] = map[string]any{"type": "https_web", "endpointSPIFFEID": v1alpha1.BundleEndpointID(tdB)}
		}, "endpointSPIFFEID is required with https_spiffe and not allowed with https_web"},
		{"an unknown profile", func(s map[string]any) { s["bundleEndpointProfile"] = map[string]any{"type": "https"} }, `Unsupported value: "https"`},
		{"a trust domain longer than a label value", func(s map[string]any) { s["trustDomain"] = strings.Repeat("b", 64) }, "spec.trustDomain"},
		{"a trust domain with a scheme", func(s map[string]any) { s["trustDomain"] = "spiffe://b.example" }, "spec.trustDomain"},
	} {
		obj := base("refused")
		tc.change(obj["spec"].(map[string]any))
		_, err := ftds.Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		if err == nil {
			_ = ftds.Delete(context.Background(), "refused", metav1.DeleteOptions{})
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want it to say %q", tc.name, err, tc.says)
		}
	}

	created, err := ftds.Create(context.Background(), &unstructured.Unstructured{Object: base("immutable")}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ftds.Delete(context.Background(), "immutable", metav1.DeleteOptions{}) })
	created.Object["spec"].(map[string]any)["trustDomain"] = "c.example"
	if _, err := ftds.Update(context.Background(), created, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.trustDomain is immutable") {
		t.Errorf("changing the trust domain: %v, want it refused as immutable", err)
	}
}

// Nothing is written that did not change, and nothing is lost or taken over: refreshes
// that bring the same bundle write no bundle; a second FederatedTrustDomain for the
// same trust domain says Conflict, naming the first, and writes nothing; a restarted
// controller takes up where it was and rewrites nothing.
func TestFederation_IdleRefreshesASecondClaimantAndARestartWriteNothing(t *testing.T) {
	c := start(t)
	live := c.liveB(t)
	c.create(t, c.peer("first-b", "https://"+c.endpoint+"/"+tdB, live.Spec.TrustBundle))
	c.waitImported(t, "first-b")
	imported := c.imported(t)
	refreshes := func() float64 {
		return metric(t, c.controller.HealthAddr, "trustsync_federation_refreshes_total", `federated_trust_domain="first-b"`)
	}
	bundleWrites := func() float64 {
		return metric(t, c.controller.HealthAddr, "trustsync_federation_writes_total", `kind="ClusterTrustBundle"`)
	}
	unchanged := func(when string) {
		t.Helper()
		b := c.imported(t)
		if b == nil || b.ResourceVersion != imported.ResourceVersion || metav1.GetControllerOf(b).Name != "first-b" {
			t.Fatalf("%s: the imported bundle was written (resourceVersion %s, was %s) or changed hands", when, b.ResourceVersion, imported.ResourceVersion)
		}
	}

	// Refreshes at B's hint, each bringing what is held.
	writes, from := bundleWrites(), refreshes()
	poll.Eventually(t, 30*time.Second, "two more refreshes", func() (bool, string) { return refreshes() >= from+2, "not yet" })
	if got := bundleWrites(); got != writes {
		t.Errorf("refreshes that brought nothing new wrote %v bundles", got-writes)
	}
	unchanged("after idle refreshes")

	// A second claimant.
	c.create(t, c.peer("second-b", "https://"+c.endpoint+"/"+tdB, live.Spec.TrustBundle))
	poll.Eventually(t, 30*time.Second, "the second claimant refused", func() (bool, string) {
		st, reason, msg := ready(c.status(t, "second-b"))
		return st == metav1.ConditionFalse && reason == v1alpha1.ReasonConflict && strings.Contains(msg, "first-b"), string(st) + " " + reason + ": " + msg
	})
	unchanged("after a second claimant")

	// A restart.
	restarted, err := c.controller.Restart(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.controller = restarted
	poll.Eventually(t, 30*time.Second, "the restarted controller serves its metrics", func() (bool, string) {
		resp, err := http.Get("http://" + restarted.HealthAddr + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return true, ""
	})
	poll.Eventually(t, time.Minute, "the restarted controller refreshes the peer twice", func() (bool, string) {
		return refreshes() >= 2, "not yet"
	})
	if got := bundleWrites(); got != 0 {
		t.Errorf("the restarted controller wrote %v bundles that had not changed", got)
	}
	unchanged("after a restart")
	if st, reason, msg := ready(c.status(t, "first-b")); st != metav1.ConditionTrue {
		t.Errorf("after a restart first-b is %s %s: %s", st, reason, msg)
	}
	if st, reason, _ := ready(c.status(t, "second-b")); reason != v1alpha1.ReasonConflict {
		t.Errorf("after a restart second-b is %s %s, want still Conflict", st, reason)
	}
}
