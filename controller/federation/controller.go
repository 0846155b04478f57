// Package federation keeps every FederatedTrustDomain's peer bundle imported: it
// fetches the bundle from the peer's SPIFFE bundle endpoint at the refresh hint the
// peer gives (bounded, with backoff and jitter), authenticates the endpoint, accepts
// only a bundle that moves forward, and writes its X.509 authorities into a
// ClusterTrustBundle of signer trustsync.io/federated, which every delivery carries to
// the pods that select it. Nothing a peer sends can make the imported bundle worse:
// what cannot be fetched, authenticated or accepted leaves the last good anchors.
package federation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/controller/readystatus"
	"github.com/trustsync/trustsync/kubeapi/queue"
)

// FieldManager is the controller's name in the imported bundles' and the
// FederatedTrustDomains' managedFields.
const FieldManager = "trustsync-federation"

// Refresh bounds: a peer's hint is obeyed within them; without one, DefaultRefresh.
const (
	MinRefresh     = 5 * time.Second
	MaxRefresh     = time.Hour
	DefaultRefresh = 5 * time.Minute
)

// Config is what the controller needs.
type Config struct {
	Dynamic dynamic.Interface
	// Stores are the bundle APIs served: the imported bundle is written to each (the
	// native API and trustsync's mirror alike), so no reader misses it.
	Stores  []*bundleapi.Store
	Events  record.EventRecorder
	Fetcher Fetcher
	Metrics *Metrics
	// Holding counts the pods selecting a bundle that hold all of anchors; nil, or
	// ok false, where no reports are served.
	Holding func(ctx context.Context, anchors []string, bundles []*certificatesv1.ClusterTrustBundle) (p *v1alpha1.PodsHolding, ok bool)
	Resync  time.Duration
	Clock   clock.Clock
	// MinRefresh overrides the least time between two fetches of one peer (tests).
	MinRefresh time.Duration
}

// Controller imports the peers' bundles.
type Controller struct {
	cfg      Config
	queue    workqueue.TypedRateLimitingInterface[string]
	informer cache.SharedIndexInformer
	// imported holds, per bundle API served (in Stores' order), the bundles of signer
	// trustsync.io/federated, by upstream name: what is held is read from here, not
	// asked of the API server at each refresh.
	imported     []cache.Store
	importedRuns []cache.Controller

	status readystatus.Writer

	mu    sync.Mutex
	peers map[string]*peer
}

// peer is what is kept between refreshes of one FederatedTrustDomain.
type peer struct {
	uid        types.UID
	generation int64
	next       time.Time
	failures   int
	// hint is the refresh hint of the last bundle accepted, which bounds the backoff.
	hint time.Duration
}

// New sets up the informer; Run starts it.
func New(cfg Config) *Controller {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.MinRefresh == 0 {
		cfg.MinRefresh = MinRefresh
	}
	c := &Controller{cfg: cfg, peers: map[string]*peer{},
		queue:  queue.New[string]("trustsync_federation"),
		status: readystatus.Writer{Dynamic: cfg.Dynamic, Resource: v1alpha1.FederatedTrustDomainResource, FieldManager: FieldManager, Events: cfg.Events}}
	c.informer = dynamicinformer.NewDynamicSharedInformerFactory(cfg.Dynamic, cfg.Resync).ForResource(v1alpha1.FederatedTrustDomainResource).Informer()
	_ = c.informer.AddIndexers(cache.Indexers{byBundleIndex: func(obj any) ([]string, error) {
		if name, ok := importedBundleOf(obj); ok {
			return []string{name}, nil
		}
		return nil, nil
	}})
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	// A FederatedTrustDomain gone hands its trust domain to the next claimant at
	// once, not at a resync: the bundle would be missing meanwhile.
	deleted := func(obj any) {
		enqueue(obj)
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if name, ok := importedBundleOf(obj); ok {
			c.enqueueClaimants(name)
		}
	}
	_, _ = c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) }, DeleteFunc: deleted})
	// An imported bundle changed or deleted by anyone sends every FederatedTrustDomain
	// of its trust domain to look again (and restore it: see diverged), whoever its
	// owner says it is: an owner removed or swapped is restored too.
	byOwner := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if b, ok := obj.(*certificatesv1.ClusterTrustBundle); ok {
			if owner := metav1.GetControllerOf(b); owner != nil && owner.Kind == v1alpha1.FederatedTrustDomainKind {
				c.queue.Add(owner.Name)
			}
			c.enqueueClaimants(b.Name) // the informers hold upstream names
		}
	}
	for _, s := range cfg.Stores {
		opts, _, _ := bundle.Selector{SignerName: v1alpha1.FederatedSignerName, LabelSelector: &metav1.LabelSelector{}}.ListOptions(s.API().Form)
		store, run := cache.NewInformerWithOptions(cache.InformerOptions{
			ListerWatcher: s.ListWatch(opts), ObjectType: &certificatesv1.ClusterTrustBundle{}, ResyncPeriod: cfg.Resync,
			Handler: cache.ResourceEventHandlerFuncs{AddFunc: byOwner, UpdateFunc: func(_, n any) { byOwner(n) }, DeleteFunc: byOwner},
		})
		c.imported, c.importedRuns = append(c.imported, store), append(c.importedRuns, run)
	}
	return c
}

// byBundleIndex indexes FederatedTrustDomains by the imported bundle they write.
const byBundleIndex = "bundle"

// importedBundleOf is the imported bundle a FederatedTrustDomain (as the informer
// holds it) writes.
func importedBundleOf(obj any) (string, bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return "", false
	}
	td, _, _ := unstructured.NestedString(u.Object, "spec", "trustDomain")
	return v1alpha1.FederatedBundleName(td), true
}

// enqueueClaimants queues every FederatedTrustDomain writing the bundle name.
func (c *Controller) enqueueClaimants(name string) {
	objs, _ := c.informer.GetIndexer().ByIndex(byBundleIndex, name)
	for _, obj := range objs {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			c.queue.Add(u.GetName())
		}
	}
}

// Run runs the informer and workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown()
	go c.informer.RunWithContext(ctx)
	synced := []cache.InformerSynced{c.informer.HasSynced}
	for _, run := range c.importedRuns {
		go run.RunWithContext(ctx)
		synced = append(synced, run.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	queue.Work(ctx, c.queue, workers, v1alpha1.FederatedTrustDomainKind, c.reconcile)
	<-ctx.Done()
}

// reconcile refreshes a peer when it is due and says when it is next due.
func (c *Controller) reconcile(ctx context.Context, name string) (time.Duration, error) {
	obj, exists, err := c.informer.GetIndexer().GetByKey(name)
	if err != nil {
		return 0, err
	}
	if !exists {
		c.forget(name)
		return 0, nil // the imported bundle is owned by it: the garbage collector removes it
	}
	u := obj.(*unstructured.Unstructured)
	ftd, err := v1alpha1.FederatedTrustDomainFromUnstructured(u)
	var spec *v1alpha1.ParsedFederatedTrustDomainSpec
	var specErr error
	if err == nil {
		spec, specErr = v1alpha1.ParseFederatedTrustDomainSpec(&ftd.Spec)
	}
	now := c.cfg.Clock.Now()
	p := c.peer(name, u)
	if err == nil && now.Before(p.next) && (specErr != nil || !c.diverged(ftd, spec)) {
		return p.next.Sub(now), nil
	}
	var outcome result
	switch {
	case err != nil:
		outcome = result{reason: v1alpha1.ReasonInvalidSpec, message: err.Error()}
	case specErr != nil:
		outcome = result{reason: v1alpha1.ReasonInvalidSpec, message: specErr.Error()}
	default:
		outcome = c.refresh(ctx, ftd, spec)
	}
	c.cfg.Metrics.observe(ftd, outcome, now)
	if err := c.setStatus(ctx, u, ftd, outcome); err != nil {
		return 0, err
	}
	c.schedule(p, outcome, now)
	if p.next.IsZero() {
		return 0, nil
	}
	return p.next.Sub(now), nil
}

func (c *Controller) peer(name string, u *unstructured.Unstructured) *peer {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.peers[name]
	if !ok || p.uid != u.GetUID() || p.generation != u.GetGeneration() {
		// New, recreated or changed: refresh now.
		p = &peer{uid: u.GetUID(), generation: u.GetGeneration()}
		c.peers[name] = p
	}
	return p
}

func (c *Controller) forget(name string) {
	c.mu.Lock()
	delete(c.peers, name)
	c.mu.Unlock()
	c.cfg.Fetcher.Forget(name)
	c.cfg.Metrics.forget(name)
}

// schedule sets when the peer is next fetched: at its refresh hint (within the
// bounds) after a success, after a growing backoff (never longer than the hint)
// after a failure; never for a spec that cannot work, until it changes. Each with
// ±10% jitter, so that many peers never fetch in step.
func (c *Controller) schedule(p *peer, r result, now time.Time) {
	if r.reason == v1alpha1.ReasonInvalidSpec || r.reason == v1alpha1.ReasonConflict && r.conflictFinal {
		p.next = time.Time{}
		return
	}
	if r.ok {
		p.hint = r.refreshHint
	}
	interval := DefaultRefresh
	if p.hint > 0 {
		interval = min(max(p.hint, c.cfg.MinRefresh), MaxRefresh)
	}
	if r.ok {
		p.failures = 0
	} else {
		p.failures++
		backoff := c.cfg.MinRefresh << min(p.failures-1, 10)
		interval = min(backoff, interval)
	}
	jitter := time.Duration((rand.Float64()*0.2 - 0.1) * float64(interval))
	p.next = now.Add(max(interval+jitter, c.cfg.MinRefresh))
}

// result is one refresh's outcome.
type result struct {
	ok bool
	// reason and message are the Ready condition's; changed says the imported
	// bundle changed (anchors added or removed).
	reason, message string
	changed         bool
	// restored: the bundle object had been deleted or changed by someone else and
	// was written again with what was accepted.
	restored bool
	// held is the bundle held after the refresh (nil: none yet).
	held     *spiffebundle.Bundle
	sequence *uint64
	// refreshed is set when the endpoint answered with a bundle accepted or equal.
	refreshed   bool
	refreshHint time.Duration
	bytes       int
	bundleName  string
	bundles     []*certificatesv1.ClusterTrustBundle
	// conflictFinal: another FederatedTrustDomain imports this trust domain.
	conflictFinal bool
	// expired says which anchors imported are expired (empty: none).
	expired string
}

// refresh fetches the peer's bundle and imports it when it may.
func (c *Controller) refresh(ctx context.Context, ftd *v1alpha1.FederatedTrustDomain, spec *v1alpha1.ParsedFederatedTrustDomainSpec) result {
	td, name := spec.TrustDomain, spec.BundleName
	r := result{bundleName: name, sequence: ftd.Status.Sequence}

	held, bundles, err := c.held(ctx, ftd, td, name)
	r.bundles = bundles
	var conflict *conflictError
	switch {
	case errors.As(err, &conflict):
		r.reason, r.message, r.conflictFinal = v1alpha1.ReasonConflict, err.Error(), true
		return r
	case err != nil:
		r.reason, r.message = v1alpha1.ReasonBundleWriteFailed, err.Error()
		return r
	}
	bootstrap := spec.Bootstrap
	if bootstrap != nil {
		if err := checkDomain(td, bootstrap); err != nil {
			r.reason, r.message = v1alpha1.ReasonInvalidSpec, "spec.trustDomainBundle: "+err.Error()
			return r
		}
	}
	if held == nil && bootstrap != nil {
		// Nothing imported yet: start from the bootstrap bundle, so pods trust the
		// peer even before its endpoint first answers.
		if err := c.write(ctx, ftd, name, bootstrap); err != nil {
			r.reason, r.message = v1alpha1.ReasonBundleWriteFailed, err.Error()
			return r
		}
		held, r.changed = bootstrap, true
	}
	r.held = held

	// The endpoint is authenticated by what is held, and by the bootstrap bundle the
	// operator gives (so that a peer whose CA moved on while this cluster could not
	// fetch can be trusted again by updating spec.trustDomainBundle).
	trusted := spiffebundle.New(td)
	for _, b := range []*spiffebundle.Bundle{held, bootstrap} {
		if b != nil {
			for _, a := range b.X509Authorities() {
				trusted.AddX509Authority(a)
			}
		}
	}
	fetched, n, err := c.cfg.Fetcher.Fetch(ctx, ftd.Name, spec, trusted)
	r.bytes = n
	if err != nil {
		var fe *FetchError
		r.reason, r.message = v1alpha1.ReasonEndpointUnreachable, err.Error()
		if errors.As(err, &fe) {
			r.reason = fe.Reason
		}
		r.message += keptMessage(held)
		return r
	}
	r.refreshHint, _ = fetched.RefreshHint()
	if err := checkDomain(td, fetched); err != nil {
		r.reason, r.message = v1alpha1.ReasonInvalidBundle, err.Error()+keptMessage(held)
		return r
	}
	seq, hasSeq := fetched.SequenceNumber()
	if hasSeq && seq > math.MaxInt64 {
		r.reason, r.message = v1alpha1.ReasonInvalidBundle, fmt.Sprintf("the endpoint's sequence %d is beyond what the status can record (%d)", seq, int64(math.MaxInt64))+keptMessage(held)
		return r
	}
	// The sequence is compared with what was last accepted from the peer (the
	// status), never with the bundle object, which someone else may have touched.
	accepted := slices.Equal(ftd.Status.Anchors, v1alpha1.BundleAnchors(fetched))
	if !hasSeq && ftd.Status.Sequence != nil && !accepted {
		// Without a sequence nothing says this bundle comes after the one held: it
		// may be an old one replayed, rolling the anchors back.
		r.reason, r.message = v1alpha1.ReasonSequenceRegressed, fmt.Sprintf("the endpoint's bundle carries no spiffe_sequence, so it cannot be ordered after the one held (sequence %d), and its anchors differ; refused", *ftd.Status.Sequence)+keptMessage(held)
		return r
	}
	if hasSeq && ftd.Status.Sequence != nil {
		prev := *ftd.Status.Sequence
		if seq < prev || seq == prev && !accepted {
			what := "went back"
			if seq == prev {
				what = "did not move though the anchors changed"
			}
			r.reason, r.message = v1alpha1.ReasonSequenceRegressed, fmt.Sprintf("the endpoint's bundle sequence %s (%d, held %d); refused", what, seq, prev)+keptMessage(held)
			return r
		}
	}
	if c.needsWrite(ftd, name, v1alpha1.BundlePEM(fetched)) {
		if err := c.write(ctx, ftd, name, fetched); err != nil {
			r.reason, r.message = v1alpha1.ReasonBundleWriteFailed, err.Error()+keptMessage(held)
			return r
		}
		r.changed, r.restored = !accepted, accepted && held != nil
	}
	r.held, r.ok, r.refreshed, r.reason = fetched, true, true, v1alpha1.ReasonRefreshed
	if hasSeq {
		r.sequence = &seq
	}
	r.message = fmt.Sprintf("%s holds the %d anchors of trust domain %s", name, len(fetched.X509Authorities()), td)
	if hasSeq {
		r.message += fmt.Sprintf(" at sequence %d", seq)
	}
	if expired := v1alpha1.ExpiredAuthorities(fetched, c.cfg.Clock.Now()); len(expired) > 0 {
		ids := make([]string, 0, len(expired))
		for _, a := range expired {
			ids = append(ids, fmt.Sprintf("%s (%s, expired %s)", bundle.AnchorID(a.Raw), a.Subject, a.NotAfter.UTC().Format(time.RFC3339)))
		}
		r.expired = fmt.Sprintf("the peer publishes %d expired anchors, imported as it sent them: %s", len(expired), strings.Join(ids, ", "))
		r.message += "; " + r.expired
	}
	return r
}

func keptMessage(held *spiffebundle.Bundle) string {
	if held == nil {
		return "; nothing imported yet"
	}
	return fmt.Sprintf("; the %d anchors held are kept", len(held.X509Authorities()))
}

// checkDomain refuses a bundle whose authorities name another trust domain (a CA
// certificate with a spiffe:// URI SAN, as SPIRE's carry): a peer may only ever
// speak for its own domain.
func checkDomain(td spiffeid.TrustDomain, b *spiffebundle.Bundle) error {
	for _, a := range b.X509Authorities() {
		for _, u := range a.URIs {
			if u.Scheme != "spiffe" {
				continue
			}
			if id, err := spiffeid.FromURI(u); err == nil && id.TrustDomain() != td {
				return fmt.Errorf("the endpoint sent an authority of trust domain %q (%s) for %q; refused", id.TrustDomain(), u, td)
			}
		}
	}
	return nil
}

// conflictError: the imported bundle's name belongs to another FederatedTrustDomain.
type conflictError struct{ msg string }

func (e *conflictError) Error() string { return e.msg }

// diverged says whether an imported bundle no longer holds what the status says was
// written (deleted, or edited by someone else): the peer is then refreshed at once,
// which writes it again.
func (c *Controller) diverged(ftd *v1alpha1.FederatedTrustDomain, spec *v1alpha1.ParsedFederatedTrustDomainSpec) bool {
	if len(ftd.Status.Anchors) == 0 {
		return false
	}
	name := spec.BundleName
	for _, store := range c.imported {
		obj, exists, err := store.GetByKey(name)
		if err != nil || !exists {
			return true
		}
		b := obj.(*certificatesv1.ClusterTrustBundle)
		certs, err := bundle.ParseCertificates([]byte(b.Spec.TrustBundle))
		if err != nil || !slices.Equal(v1alpha1.AnchorIDsOf(certs), ftd.Status.Anchors) || !ownedAsWritten(b, ftd) {
			return true
		}
	}
	return false
}

// needsWrite says whether any bundle API's imported bundle is not what write would
// make of pem: absent, other anchors, or its label or owner changed. An unchanged
// bundle is never sent again, whatever else failed (a status write, say).
func (c *Controller) needsWrite(ftd *v1alpha1.FederatedTrustDomain, name, pem string) bool {
	for _, store := range c.imported {
		obj, exists, err := store.GetByKey(name)
		if err != nil || !exists {
			return true
		}
		if b := obj.(*certificatesv1.ClusterTrustBundle); b.Spec.TrustBundle != pem || !ownedAsWritten(b, ftd) {
			return true
		}
	}
	return false
}

// ownedAsWritten says the bundle still carries what write gives it besides its
// anchors: the trust-domain label (which decides which pods trust the peer) and ftd
// as its controller (whose deletion withdraws the peer).
func ownedAsWritten(b *certificatesv1.ClusterTrustBundle, ftd *v1alpha1.FederatedTrustDomain) bool {
	owner := metav1.GetControllerOf(b)
	return b.Labels[v1alpha1.TrustDomainLabel] == ftd.Spec.TrustDomain && owner != nil && owner.UID == ftd.UID
}

// held reads the imported bundle as the informers have it (the first bundle API
// served's): nil when none was written yet. One controlled by another live
// FederatedTrustDomain is a conflict.
func (c *Controller) held(ctx context.Context, ftd *v1alpha1.FederatedTrustDomain, td spiffeid.TrustDomain, name string) (*spiffebundle.Bundle, []*certificatesv1.ClusterTrustBundle, error) {
	var found []*certificatesv1.ClusterTrustBundle
	for _, store := range c.imported {
		obj, exists, err := store.GetByKey(name)
		if err != nil {
			return nil, nil, err
		}
		if !exists {
			continue
		}
		b := obj.(*certificatesv1.ClusterTrustBundle)
		if owner := metav1.GetControllerOf(b); owner != nil && owner.UID != ftd.UID {
			if _, exists, _ := c.informer.GetIndexer().GetByKey(owner.Name); exists {
				return nil, nil, &conflictError{fmt.Sprintf("FederatedTrustDomain %s imports trust domain %s already (it owns %s); delete one of the two", owner.Name, ftd.Spec.TrustDomain, name)}
			}
		}
		found = append(found, b)
	}
	if len(found) == 0 {
		return nil, nil, nil
	}
	b, err := v1alpha1.ParseSPIFFEBundle(td, []byte(found[0].Spec.TrustBundle))
	if err != nil {
		// Only this controller attests for the signer, so this is not expected; the
		// next accepted fetch rewrites it.
		klog.FromContext(ctx).Error(err, "The imported bundle does not parse; it is rewritten at the next accepted fetch", "bundle", name)
		return nil, found, nil
	}
	return b, found, nil
}

// write applies the imported bundle to every bundle API served: the peer's anchors,
// the trust-domain label, and the FederatedTrustDomain as its controller, so that
// deleting the FederatedTrustDomain deletes it.
func (c *Controller) write(ctx context.Context, ftd *v1alpha1.FederatedTrustDomain, name string, b *spiffebundle.Bundle) error {
	ctb := &certificatesv1.ClusterTrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:          map[string]string{v1alpha1.TrustDomainLabel: ftd.Spec.TrustDomain, "app.kubernetes.io/managed-by": "trustsync"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ftd, v1alpha1.FederatedTrustDomainResource.GroupVersion().WithKind(v1alpha1.FederatedTrustDomainKind))}},
		Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: v1alpha1.FederatedSignerName, TrustBundle: v1alpha1.BundlePEM(b)},
	}
	ctb.OwnerReferences[0].BlockOwnerDeletion = nil
	for _, s := range c.cfg.Stores {
		if _, err := s.Apply(ctx, ctb, FieldManager); err != nil {
			return fmt.Errorf("write %s to %s: %w", name, s.API(), err)
		}
		c.cfg.Metrics.wrote()
	}
	return nil
}

// setStatus records the outcome: the Ready condition, what is held, how far it has
// reached the pods; an Event when the anchors changed or Ready did.
func (c *Controller) setStatus(ctx context.Context, u *unstructured.Unstructured, ftd *v1alpha1.FederatedTrustDomain, r result) error {
	now := metav1.NewTime(c.cfg.Clock.Now().Truncate(time.Second))
	var old v1alpha1.FederatedTrustDomainStatus
	if ftd != nil {
		old = ftd.Status
	}
	status := old
	status.ObservedGeneration = u.GetGeneration()
	status.Conditions = slices.Clone(old.Conditions)
	r.message = bounded(r.message)
	ready := readystatus.Ready{OK: r.ok, Reason: r.reason, Message: r.message}
	if r.held != nil {
		status.Anchors, status.Bundle = v1alpha1.BundleAnchors(r.held), r.bundleName
		status.Sequence = r.sequence
	}
	if r.refreshed {
		status.LastRefreshed = &now
	}
	if c.cfg.Holding != nil && r.held != nil {
		if p, ok := c.cfg.Holding(ctx, status.Anchors, r.bundles); ok {
			status.Pods = p
		}
	}
	readyChanged := readystatus.Set(&status.Conditions, ready, u.GetGeneration())
	if r.changed && r.held != nil {
		added, removed := diff(old.Anchors, status.Anchors)
		c.cfg.Events.Event(u, corev1.EventTypeNormal, "BundleImported", bounded(fmt.Sprintf("%s now holds %d anchors of %s (added %s; removed %s)%s",
			r.bundleName, len(status.Anchors), ftd.Spec.TrustDomain, list(added), list(removed), sequenceNote(status.Sequence))))
	}
	if r.changed && r.expired != "" {
		c.cfg.Events.Event(u, corev1.EventTypeWarning, "ExpiredAnchors", bounded(r.expired))
	}
	if r.restored {
		c.cfg.Events.Eventf(u, corev1.EventTypeWarning, "BundleRestored", "%s did not hold the %d anchors accepted from %s (changed or deleted by someone else); written again", r.bundleName, len(status.Anchors), ftd.Spec.TrustDomain)
	}
	// On a conflict the peer stays due (the error skips its scheduling): it is
	// refreshed again from the newer version, since the sequence recorded is what a
	// fetch is compared with.
	sent, err := c.status.Write(ctx, u, old, &status, readyChanged, ready, func() bool { return onlyRefreshedRecently(old, status) })
	if sent {
		c.cfg.Metrics.statusWritten()
	}
	return err
}

// maxMessage bounds a condition message or Event written from what a peer sent (an
// error quoting a huge document, say): the CRD allows 32 KiB, and a status that
// cannot be written would keep saying what was true before.
const maxMessage = 4096

// bounded cuts msg to maxMessage bytes (on a rune boundary), saying how much was cut.
func bounded(msg string) string {
	if len(msg) <= maxMessage {
		return msg
	}
	cut := maxMessage
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d more bytes cut)", msg[:cut], len(msg)-cut)
}

// statusRefreshEvery is how often a status whose only change is lastRefreshed is
// written: a peer refreshing every few seconds would otherwise cost a write each time
// (the metric trustsync_federation_last_refreshed_timestamp_seconds stays exact).
const statusRefreshEvery = time.Minute

// onlyRefreshedRecently says the new status differs from the old only by a
// lastRefreshed less than statusRefreshEvery after the one recorded.
func onlyRefreshedRecently(old, status v1alpha1.FederatedTrustDomainStatus) bool {
	if old.LastRefreshed == nil || status.LastRefreshed == nil || status.LastRefreshed.Sub(old.LastRefreshed.Time) >= statusRefreshEvery {
		return false
	}
	same := status
	same.LastRefreshed = old.LastRefreshed
	return equalStatus(old, same)
}

func sequenceNote(seq *uint64) string {
	if seq == nil {
		return ""
	}
	return fmt.Sprintf(", sequence %d", *seq)
}

func diff(before, after []string) (added, removed []string) {
	for _, a := range after {
		if !slices.Contains(before, a) {
			added = append(added, a)
		}
	}
	for _, b := range before {
		if !slices.Contains(after, b) {
			removed = append(removed, b)
		}
	}
	return added, removed
}

func list(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}

func equalStatus(a, b v1alpha1.FederatedTrustDomainStatus) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
