package federation

import (
	"context"
	"crypto/x509"
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trustsync/trustsync/api/v1alpha1"
	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

const peerDomain = "b.example"

var (
	peerCA    = fixtures.CA("b.example root")
	peerCANew = fixtures.CA("b.example next root")
)

// answer is what the peer's endpoint answers one fetch with.
type answer struct {
	bundle *spiffebundle.Bundle
	err    error
}

// fetcher answers each fetch with the next of its answers, the last one again after.
type fetcher struct {
	mu      sync.Mutex
	answers []answer
	fetches int
	trusted []*spiffebundle.Bundle // what each fetch was given to authenticate with
}

func (f *fetcher) Fetch(_ context.Context, _ string, _ *v1alpha1.ParsedFederatedTrustDomainSpec, trusted *spiffebundle.Bundle) (*spiffebundle.Bundle, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.answers[min(f.fetches, len(f.answers)-1)]
	f.fetches++
	f.trusted = append(f.trusted, trusted)
	if a.err != nil {
		return nil, 0, a.err
	}
	return a.bundle, 100, nil
}

func (f *fetcher) Forget(string) {}

// peerBundle is the peer's SPIFFE bundle of cas at seq (none: no sequence).
func peerBundle(seq *uint64, cas ...*fixtures.Cert) *spiffebundle.Bundle {
	var certs []*x509.Certificate
	for _, ca := range cas {
		certs = append(certs, ca.Cert)
	}
	b := spiffebundle.FromX509Authorities(spiffeid.RequireTrustDomainFromString(peerDomain), certs)
	if seq != nil {
		b.SetSequenceNumber(*seq)
	}
	return b
}

func seq(n uint64) *uint64 { return &n }

func mustURL(raw string) *url.URL {
	u, err := url.Parse(raw)
	if err != nil {
		panic(err)
	}
	return u
}

// mustMarshal is b as a FederatedTrustDomain's spec.trustDomainBundle holds it.
func mustMarshal(b *spiffebundle.Bundle) string {
	raw, err := fixtures.SPIFFEBundleJSON(b)
	if err != nil {
		panic(err)
	}
	return string(raw)
}

// fedHarness is a Controller over a fake dynamic client, its informers synced.
type fedHarness struct {
	t      *testing.T
	ctx    context.Context
	c      *Controller
	dyn    *dynamicfake.FakeDynamicClient
	fetch  *fetcher
	clock  *clocktesting.FakeClock
	events *record.FakeRecorder
}

func ftd(name string, mutate ...func(*v1alpha1.FederatedTrustDomain)) *v1alpha1.FederatedTrustDomain {
	f := &v1alpha1.FederatedTrustDomain{TypeMeta: metav1.TypeMeta{APIVersion: "trustsync.io/v1alpha1", Kind: v1alpha1.FederatedTrustDomainKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-uid"), Generation: 1},
		Spec: v1alpha1.FederatedTrustDomainSpec{TrustDomain: peerDomain, BundleEndpointURL: "https://b.example:8443/bundle",
			BundleEndpointProfile: v1alpha1.BundleEndpointProfile{Type: v1alpha1.ProfileWeb}}}
	for _, m := range mutate {
		m(f)
	}
	return f
}

func startFederation(t *testing.T, answers []answer, objects ...any) *fedHarness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var objs []runtime.Object
	for _, o := range objects {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		if _, ok := o.(*certificatesv1.ClusterTrustBundle); ok {
			u.SetAPIVersion(tsbundle.NativeV1.GroupVersion.String())
			u.SetKind("ClusterTrustBundle")
		}
		objs = append(objs, u)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		tsbundle.NativeV1.GroupVersionResource(): "ClusterTrustBundleList",
		v1alpha1.FederatedTrustDomainResource:    "FederatedTrustDomainList",
	}, objs...)
	applyAsTheAPIServerWould(dyn, "clustertrustbundles")
	h := &fedHarness{t: t, ctx: ctx, dyn: dyn, fetch: &fetcher{answers: answers}, events: record.NewFakeRecorder(100),
		clock: clocktesting.NewFakeClock(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))}
	h.c = New(Config{Dynamic: dyn, Stores: []*bundleapi.Store{bundleapi.NewStore(dyn, tsbundle.NativeV1)}, Events: h.events,
		Fetcher: h.fetch, Metrics: NewMetrics(prometheus.NewRegistry()), Clock: h.clock})
	go h.c.informer.RunWithContext(ctx)
	synced := []cache.InformerSynced{h.c.informer.HasSynced}
	for _, run := range h.c.importedRuns {
		go run.RunWithContext(ctx)
		synced = append(synced, run.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		t.Fatal("the informers did not sync")
	}
	return h
}

// applyAsTheAPIServerWould makes the fake's server-side apply of resource what the
// API server's is for a forced apply of the fields the controllers give: the object
// created when missing, and otherwise its spec, labels, annotations and owners replaced
// (the fake's tracker applies only to an object that exists). The API server's own
// apply is the e2e suite's (test/e2e/federation).
func applyAsTheAPIServerWould(dyn *dynamicfake.FakeDynamicClient, resource string) {
	dyn.PrependReactor("patch", resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		p, ok := a.(k8stesting.PatchAction)
		if !ok || p.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		applied := &unstructured.Unstructured{}
		if err := applied.UnmarshalJSON(p.GetPatch()); err != nil {
			return true, nil, err
		}
		gvr := p.GetResource()
		existing, err := dyn.Tracker().Get(gvr, "", p.GetName())
		if apierrors.IsNotFound(err) {
			if err := dyn.Tracker().Create(gvr, applied, ""); err != nil {
				return true, nil, err
			}
			return true, applied, nil
		}
		if err != nil {
			return true, nil, err
		}
		u := existing.(*unstructured.Unstructured).DeepCopy()
		u.Object["spec"] = applied.Object["spec"]
		u.SetLabels(applied.GetLabels())
		u.SetAnnotations(applied.GetAnnotations())
		u.SetOwnerReferences(applied.GetOwnerReferences())
		if err := dyn.Tracker().Update(gvr, u, ""); err != nil {
			return true, nil, err
		}
		return true, u, nil
	})
}

// reconcile reconciles name once the informers hold what the API server does (the
// controller's own last writes included), and returns when it is next due.
func (h *fedHarness) reconcile(name string) time.Duration {
	h.t.Helper()
	h.settle(name)
	after, err := h.c.reconcile(h.ctx, name)
	if err != nil {
		h.t.Fatalf("reconcile %s: %v", name, err)
	}
	return after
}

// settle waits until the informers hold the FederatedTrustDomain name and the
// imported bundle as the API server does (the fake sets no resourceVersions, so the
// objects themselves are compared).
func (h *fedHarness) settle(name string) {
	h.t.Helper()
	same := func(live *unstructured.Unstructured, err error, cached any, exists bool) bool {
		if apierrors.IsNotFound(err) {
			return !exists
		}
		if err != nil || !exists {
			return false
		}
		var obj map[string]any
		switch c := cached.(type) {
		case *unstructured.Unstructured:
			obj = c.Object
		case *certificatesv1.ClusterTrustBundle:
			return c.Spec.TrustBundle == nestedString(live, "spec", "trustBundle") && equality.Semantic.DeepEqual(c.Labels, live.GetLabels()) && len(c.OwnerReferences) == len(live.GetOwnerReferences())
		}
		return equality.Semantic.DeepEqual(obj, live.Object)
	}
	poll.True(h.t, 10*time.Second, "the informers to catch up", func() bool {
		live, err := h.dyn.Resource(v1alpha1.FederatedTrustDomainResource).Get(h.ctx, name, metav1.GetOptions{})
		cached, exists, _ := h.c.informer.GetIndexer().GetByKey(name)
		if !same(live, err, cached, exists) {
			return false
		}
		b, err := h.dyn.Resource(tsbundle.NativeV1.GroupVersionResource()).Get(h.ctx, v1alpha1.FederatedBundleName(peerDomain), metav1.GetOptions{})
		cachedB, cachedExists, _ := h.c.imported[0].GetByKey(v1alpha1.FederatedBundleName(peerDomain))
		return same(b, err, cachedB, cachedExists)
	})
}

func nestedString(u *unstructured.Unstructured, fields ...string) string {
	v, _, _ := unstructured.NestedString(u.Object, fields...)
	return v
}

// status is name's status as the API server holds it.
func (h *fedHarness) status(name string) v1alpha1.FederatedTrustDomainStatus {
	h.t.Helper()
	u, err := h.dyn.Resource(v1alpha1.FederatedTrustDomainResource).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	f, err := v1alpha1.FederatedTrustDomainFromUnstructured(u)
	if err != nil {
		h.t.Fatal(err)
	}
	return f.Status
}

// imported is the anchors of the imported bundle, and its owner's name ("" without
// a bundle).
func (h *fedHarness) imported() (anchors []string, owner string) {
	h.t.Helper()
	u, err := h.dyn.Resource(tsbundle.NativeV1.GroupVersionResource()).Get(h.ctx, v1alpha1.FederatedBundleName(peerDomain), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, ""
	}
	if err != nil {
		h.t.Fatal(err)
	}
	pem, _, _ := unstructured.NestedString(u.Object, "spec", "trustBundle")
	anchors, err = tsbundle.AnchorIDs([]byte(pem))
	if err != nil {
		h.t.Fatal(err)
	}
	if refs := u.GetOwnerReferences(); len(refs) == 1 {
		owner = refs[0].Name
	}
	return anchors, owner
}

func idsOf(cas ...*fixtures.Cert) []string {
	var ids []string
	for _, ca := range cas {
		ids = append(ids, tsbundle.AnchorID(ca.Cert.Raw))
	}
	slices.Sort(ids)
	return ids
}

func (h *fedHarness) recorded() []string {
	var out []string
	for {
		select {
		case e := <-h.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// The rules of the refreshes of one peer, each a case: what the peer answers in
// turn, and what is imported, and what the status says, after the last.
func TestRefresh_ImportsOnlyABundleThatMovesForwardAndKeepsTheLastGoodOne(t *testing.T) {
	unreachable := &FetchError{Reason: v1alpha1.ReasonEndpointUnreachable, Err: errors.New("dial tcp: connection refused")}
	for _, tc := range []struct {
		name    string
		spec    func(*v1alpha1.FederatedTrustDomain)
		answers []answer
		// want are the anchors imported after the last refresh (nil: none).
		want        []*fixtures.Cert
		wantReason  string
		wantReady   bool
		wantMessage string
		wantSeq     *uint64
		wantEvent   string
	}{
		{
			name:       "the peer's bundle is imported, owned by its FederatedTrustDomain",
			answers:    []answer{{bundle: peerBundle(seq(1), peerCA)}},
			want:       []*fixtures.Cert{peerCA},
			wantReason: v1alpha1.ReasonRefreshed, wantReady: true, wantMessage: "holds the 1 anchors of trust domain b.example at sequence 1", wantSeq: seq(1),
			wantEvent: "Normal BundleImported",
		},
		{
			name:       "a rotation at a higher sequence replaces the anchors",
			answers:    []answer{{bundle: peerBundle(seq(1), peerCA)}, {bundle: peerBundle(seq(2), peerCA, peerCANew)}, {bundle: peerBundle(seq(3), peerCANew)}},
			want:       []*fixtures.Cert{peerCANew},
			wantReason: v1alpha1.ReasonRefreshed, wantReady: true, wantSeq: seq(3),
		},
		{
			name:       "a bundle whose sequence went back is refused and the held one kept",
			answers:    []answer{{bundle: peerBundle(seq(5), peerCA)}, {bundle: peerBundle(seq(4), peerCANew)}},
			want:       []*fixtures.Cert{peerCA},
			wantReason: v1alpha1.ReasonSequenceRegressed, wantMessage: "went back (4, held 5); refused; the 1 anchors held are kept", wantSeq: seq(5),
			wantEvent: "Warning SequenceRegressed",
		},
		{
			name:       "new anchors at the same sequence are refused",
			answers:    []answer{{bundle: peerBundle(seq(5), peerCA)}, {bundle: peerBundle(seq(5), peerCANew)}},
			want:       []*fixtures.Cert{peerCA},
			wantReason: v1alpha1.ReasonSequenceRegressed, wantMessage: "did not move though the anchors changed",
		},
		{
			name:       "new anchors without a sequence cannot be ordered and are refused",
			answers:    []answer{{bundle: peerBundle(seq(5), peerCA)}, {bundle: peerBundle(nil, peerCANew)}},
			want:       []*fixtures.Cert{peerCA},
			wantReason: v1alpha1.ReasonSequenceRegressed, wantMessage: "carries no spiffe_sequence",
		},
		{
			name:       "an endpoint that cannot be reached keeps what is held and says so",
			answers:    []answer{{bundle: peerBundle(seq(1), peerCA)}, {err: unreachable}},
			want:       []*fixtures.Cert{peerCA},
			wantReason: v1alpha1.ReasonEndpointUnreachable, wantMessage: "connection refused; the 1 anchors held are kept", wantSeq: seq(1),
			wantEvent: "Warning EndpointUnreachable",
		},
		{
			name:       "an endpoint never reached imports nothing and says so",
			answers:    []answer{{err: unreachable}},
			wantReason: v1alpha1.ReasonEndpointUnreachable, wantMessage: "; nothing imported yet",
		},
		{
			name: "an authority of another trust domain is refused",
			answers: []answer{{bundle: peerBundle(seq(1), peerCA)}, {bundle: func() *spiffebundle.Bundle {
				b := peerBundle(seq(2), peerCA)
				b.AddX509Authority(fixtures.MustNew(fixtures.Options{CommonName: "evil", URIs: []*url.URL{mustURL("spiffe://evil.example")}}).Cert)
				return b
			}()}},
			want:       []*fixtures.Cert{peerCA},
			wantReason: v1alpha1.ReasonInvalidBundle, wantMessage: `an authority of trust domain "evil.example"`,
		},
		{
			name: "the bootstrap bundle is imported before the endpoint first answers",
			spec: func(f *v1alpha1.FederatedTrustDomain) {
				f.Spec.TrustDomainBundle = mustMarshal(peerBundle(seq(1), peerCA))
			},
			answers:    []answer{{err: unreachable}},
			want:       []*fixtures.Cert{peerCA},
			wantReason: v1alpha1.ReasonEndpointUnreachable, wantMessage: "the 1 anchors held are kept",
		},
		{
			name:       "a trust domain SPIFFE refuses is an invalid spec, never fetched",
			spec:       func(f *v1alpha1.FederatedTrustDomain) { f.Spec.TrustDomain = "Cluster.Local" },
			answers:    []answer{{bundle: peerBundle(seq(1), peerCA)}},
			wantReason: v1alpha1.ReasonInvalidSpec, wantMessage: "Cluster.Local",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mutate []func(*v1alpha1.FederatedTrustDomain)
			if tc.spec != nil {
				mutate = append(mutate, tc.spec)
			}
			h := startFederation(t, tc.answers, ftd("peer-b", mutate...))
			for range tc.answers {
				h.reconcile("peer-b")
				h.clock.Step(MaxRefresh + MaxRefresh/5) // every refresh due again
			}
			anchors, owner := h.imported()
			if want := idsOf(tc.want...); !slices.Equal(anchors, want) || (len(want) > 0 && owner != "peer-b") {
				t.Errorf("imported %v owned by %q; want %v owned by peer-b", anchors, owner, want)
			}
			st := h.status("peer-b")
			cond := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
			if cond == nil || cond.Reason != tc.wantReason || (cond.Status == metav1.ConditionTrue) != tc.wantReady || !strings.Contains(cond.Message, tc.wantMessage) {
				t.Errorf("Ready = %+v; want reason %s, ready %v, a message containing %q", cond, tc.wantReason, tc.wantReady, tc.wantMessage)
			}
			if tc.wantSeq != nil && (st.Sequence == nil || *st.Sequence != *tc.wantSeq) {
				t.Errorf("status.sequence = %v; want %d (what was last accepted)", st.Sequence, *tc.wantSeq)
			}
			if tc.wantReason == v1alpha1.ReasonInvalidSpec && h.fetch.fetches != 0 {
				t.Errorf("an invalid spec was fetched %d times", h.fetch.fetches)
			}
			if events := h.recorded(); tc.wantEvent != "" && !slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, tc.wantEvent) }) {
				t.Errorf("Events %q; want one %q", events, tc.wantEvent)
			}
		})
	}
}

// A refresh is due at the peer's hint: before it, nothing is fetched; an imported
// bundle someone else changed is written again at once, without waiting for the hint.
func TestReconcile_FetchesWhenDueAndRestoresAnEditedBundleAtOnce(t *testing.T) {
	b := peerBundle(seq(1), peerCA)
	b.SetRefreshHint(10 * time.Minute)
	h := startFederation(t, []answer{{bundle: b}}, ftd("peer-b"))
	after := h.reconcile("peer-b")
	if after < 9*time.Minute || after > 11*time.Minute {
		t.Errorf("next due in %s; want the peer's hint of 10m ±10%%", after)
	}
	h.clock.Step(time.Minute)
	h.reconcile("peer-b")
	if h.fetch.fetches != 1 {
		t.Errorf("fetched %d times before the hint; want once", h.fetch.fetches)
	}

	// Someone edits the imported bundle.
	u, err := h.dyn.Resource(tsbundle.NativeV1.GroupVersionResource()).Get(h.ctx, v1alpha1.FederatedBundleName(peerDomain), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(u.Object, fixtures.Bundle(fixtures.CA("intruder")), "spec", "trustBundle")
	if _, err := h.dyn.Resource(tsbundle.NativeV1.GroupVersionResource()).Update(h.ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.reconcile("peer-b")
	if anchors, _ := h.imported(); !slices.Equal(anchors, idsOf(peerCA)) {
		t.Errorf("after an edit the bundle holds %v; want the peer's anchors written again", anchors)
	}
	if events := h.recorded(); !slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "Warning BundleRestored") }) {
		t.Errorf("Events %q; want BundleRestored", events)
	}
}

// An endpoint is authenticated by what is held: after the first import, the next
// fetch is given the held anchors (and the bootstrap's) to verify the endpoint with.
func TestRefresh_TheEndpointIsAuthenticatedByWhatIsHeld(t *testing.T) {
	h := startFederation(t, []answer{{bundle: peerBundle(seq(1), peerCA)}, {bundle: peerBundle(seq(2), peerCA, peerCANew)}},
		ftd("peer-b", func(f *v1alpha1.FederatedTrustDomain) {
			f.Spec.BundleEndpointProfile = v1alpha1.BundleEndpointProfile{Type: v1alpha1.ProfileSPIFFE, EndpointSPIFFEID: "spiffe://b.example/trustsync/bundle-endpoint"}
			f.Spec.TrustDomainBundle = mustMarshal(peerBundle(seq(1), peerCA))
		}))
	h.reconcile("peer-b")
	h.clock.Step(MaxRefresh + MaxRefresh/5)
	h.reconcile("peer-b")
	if len(h.fetch.trusted) != 2 {
		t.Fatalf("%d fetches; want 2", len(h.fetch.trusted))
	}
	if got := v1alpha1.BundleAnchors(h.fetch.trusted[1]); !slices.Equal(got, idsOf(peerCA)) {
		t.Errorf("the second fetch was authenticated with %v; want the anchors held", got)
	}
}

// Two FederatedTrustDomains of one trust domain: the one owning the bundle keeps it,
// the other is told which owns it, and is not fetched again until it changes.
func TestRefresh_ASecondImportOfATrustDomainIsAConflictNamed(t *testing.T) {
	h := startFederation(t, []answer{{bundle: peerBundle(seq(1), peerCA)}}, ftd("peer-b"), ftd("peer-b-again"))
	h.reconcile("peer-b")
	after := h.reconcile("peer-b-again")
	st := h.status("peer-b-again")
	cond := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
	if cond == nil || cond.Reason != v1alpha1.ReasonConflict || !strings.Contains(cond.Message, "FederatedTrustDomain peer-b imports trust domain b.example already") {
		t.Errorf("Ready = %+v; want a Conflict naming peer-b", cond)
	}
	if after != 0 {
		t.Errorf("a conflict is due again in %s; want never, until it changes", after)
	}
	if _, owner := h.imported(); owner != "peer-b" {
		t.Errorf("the bundle is owned by %q; want peer-b, which imported it first", owner)
	}
}

// A write the API server refuses leaves the status saying so, and nothing is lost.
func TestRefresh_AWriteRefusedIsBundleWriteFailed(t *testing.T) {
	h := startFederation(t, []answer{{bundle: peerBundle(seq(1), peerCA)}}, ftd("peer-b"))
	h.dyn.PrependReactor("patch", "clustertrustbundles", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "clustertrustbundles"}, v1alpha1.FederatedBundleName(peerDomain), errors.New("attest refused"))
	})
	h.reconcile("peer-b")
	st := h.status("peer-b")
	cond := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
	if cond == nil || cond.Reason != v1alpha1.ReasonBundleWriteFailed || !strings.Contains(cond.Message, "attest refused") {
		t.Errorf("Ready = %+v; want BundleWriteFailed with the cause", cond)
	}
	if st.Sequence != nil || len(st.Anchors) != 0 {
		t.Errorf("status = %+v; want nothing recorded as accepted", st)
	}
}
