package signer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/signer/keeper"
	"github.com/trustsync/trustsync/trustreport/query"
)

// caManager owns one signer's CA: it creates it, advances its rotation, saves the
// state in the Secret, publishes the anchors, and hands the signing CA to the signing
// workers.
type caManager struct {
	signer     string
	namespace  string
	secretName string
	validity   time.Duration
	rotation   rotation
	client     kubernetes.Interface
	secrets    corelisters.SecretLister
	publisher  *publisher
	// keys is where the CA keys live: the Secret, or the keeper the keyRef names.
	keys    caKeys
	clock   clock.PassiveClock
	metrics *Metrics

	// gate observes propagation (observed mode); events go on the CA Secret.
	gate   propagationGate
	events record.EventRecorder
	// lastProgress is the last progress recorded as an Event, so that a waiting
	// rotation records a change of it, not every check.
	lastProgress string

	// toldKeyInSecret: the Event saying the key should move into the keeper was
	// recorded (once per run).
	toldKeyInSecret bool

	current atomic.Pointer[CA]
	// loaded, when set, runs when the signing CA changes (CSRs waiting for one can go).
	loaded func()
}

// signingCA returns the CA to sign with, or nil before the first reconcile.
func (m *caManager) signingCA() *CA { return m.current.Load() }

// signingKey is where the signing CA's key lives in the keeper: the key to ask
// after while the keeper is away.
func (m *caManager) signingKey() string {
	if ca := m.signingCA(); ca != nil && ca.KeyRef != "" {
		return ca.KeyRef
	}
	return m.keys.keeper.FirstKey()
}

// reconcile brings the CA up to date and returns when it is next due.
func (m *caManager) reconcile(ctx context.Context) (time.Duration, error) {
	logger := klog.FromContext(ctx).WithValues("signer", m.signer, "secret", m.namespace+"/"+m.secretName)
	now := m.clock.Now()
	secret, err := m.secrets.Secrets(m.namespace).Get(m.secretName)
	if apierrors.IsNotFound(err) {
		return 0, m.bootstrap(ctx, now)
	}
	if err != nil {
		return 0, err
	}
	st, err := stateFromSecret(ctx, secret, m.keys)
	var unavailable *keeper.UnavailableError
	if errors.As(err, &unavailable) {
		// Nothing to fix in the Secret: the keeper is away, and signing waits for it.
		return 0, fmt.Errorf("cannot read the CA's key: %w", err)
	}
	if err != nil {
		// Never overwrite a Secret we cannot read: it may hold the only copy of a key.
		return 0, fmt.Errorf("cannot use the CA: %w; fix or delete the Secret", err)
	}

	if m.keys.keeper != nil && st.Current.KeyRef == "" && st.Next == nil && !m.toldKeyInSecret && m.events != nil {
		// Nothing moves a key into a keeper (it would have to leave the Secret to get
		// there): a rotation makes the next CA's key in the keeper instead.
		m.events.Eventf(secret, corev1.EventTypeWarning, "KeyInSecret", "The signing CA's key is in this Secret, though the signer's keyRef names %s: request a rotation (kubectl annotate secret %s %s=$(date -u +%%FT%%TZ)) and the next CA's key is made there; this Secret then holds no key", m.keys.keeper.Describe(), m.secretName, AnnotationRotateRequested)
		m.toldKeyInSecret = true
	}
	before := st.phase()
	rot, progress, unobserved := m.observe(ctx, secret, st)
	changed, next, err := st.advance(now, rot, propagated(progress, unobserved), func(t time.Time) (*CA, error) { return generateCA(ctx, m.signer, t, m.validity, m.keys, false) })
	if err != nil {
		return 0, err
	}
	if changed {
		if secret, err = m.save(ctx, secret, st); err != nil {
			return 0, err
		}
		for _, key := range st.Unused {
			if m.events == nil {
				break
			}
			m.events.Eventf(secret, corev1.EventTypeNormal, "KeyUnused", "The key %s signs nothing and no CA still trusted needs it; trustsync never destroys a key: destroy it in the keeper as your key-management procedure says", key)
		}
	}
	if before == PhaseWaiting && st.phase() == PhaseStable {
		m.recordSwitch(secret, st, progress, unobserved)
	}
	if err := m.publisher.publish(ctx, st.anchors(), rotationStatus(st, rot, m.namespace+"/"+m.secretName)); err != nil {
		return 0, err
	}
	if st.markPublished(now) {
		if _, err = m.save(ctx, secret, st); err != nil {
			return 0, err
		}
		if err := m.publisher.publish(ctx, st.anchors(), rotationStatus(st, rot, m.namespace+"/"+m.secretName)); err != nil {
			return 0, err
		}
		next = st.nextDeadline(rot)
	}
	if after := st.phase(); after != before {
		logger.Info("CA rotation advanced", "from", before, "to", after, "signingCA", st.Current.Cert.Subject.String())
	}
	if old := m.current.Swap(st.Current); m.loaded != nil && (old == nil || !old.Cert.Equal(st.Current.Cert)) {
		m.loaded()
	}
	m.metrics.caNotAfter.WithLabelValues(m.signer).Set(float64(st.Current.Cert.NotAfter.Unix()))
	m.metrics.setPhase(m.signer, st.phase())
	if next.IsZero() {
		return 0, nil
	}
	wait := max(next.Sub(now), time.Second)
	if st.phase() == PhaseWaiting && rot.Propagation == PropagationObserved {
		// Look again soon: the pods' reports change without telling the signer.
		wait = min(wait, observeEvery)
	}
	return wait, nil
}

// propagated says whether what could be observed of a new CA lets it sign: every pod
// and every object counted holds it (the floor and the maximum wait are the
// rotation's own).
func propagated(p *query.Progress, unobserved error) bool {
	return unobserved == nil && p != nil && p.Done()
}

// observeEvery is how often a waiting rotation asks the reports again.
const observeEvery = 5 * time.Second

// observe, while a new CA waits with observed propagation, asks how far it has
// reached, records the progress (metrics, and an Event on the CA Secret when it
// changed), and returns the rotation to advance with: timed instead where no reports
// can be read. unobserved says why progress could not be told: the rotation waits
// (at most its maximum), and the Event and metric say so rather than invent a count.
func (m *caManager) observe(ctx context.Context, secret *corev1.Secret, st *caState) (rot rotation, p *query.Progress, unobserved error) {
	rot = m.rotation
	if st.phase() != PhaseWaiting || rot.Propagation != PropagationObserved || m.gate == nil {
		return rot, nil, nil
	}
	progress, ok, err := m.gate.progress(ctx, bundle.AnchorID(st.Next.Cert.Raw))
	switch {
	case err != nil:
		klog.FromContext(ctx).Error(err, "Cannot tell whether the new CA reached the pods; it waits", "signer", m.signer)
		m.metrics.rotationUnobserved.WithLabelValues(m.signer).Inc()
		m.metrics.rotationPods.DeletePartialMatch(prometheus.Labels{"signer": m.signer})
		if msg := "cannot tell whether the new CA reached the pods: " + err.Error(); msg != m.lastProgress && m.events != nil {
			m.lastProgress = msg
			m.events.Eventf(secret, corev1.EventTypeWarning, "RotationUnobserved", "The new CA (SHA-256 %s) waits to sign, at most until %s: %s",
				bundle.AnchorID(st.Next.Cert.Raw), st.NextPublishedAt.Add(rot.wait()).UTC().Format(time.RFC3339), msg)
		}
		return rot, nil, err
	case !ok:
		rot.Propagation = PropagationTimed
		return rot, nil, nil
	}
	progress.Skip(st.SkipPods)
	m.metrics.rotationPods.WithLabelValues(m.signer, "expected").Set(float64(progress.Expected))
	m.metrics.rotationPods.WithLabelValues(m.signer, "holding").Set(float64(progress.Holding))
	m.metrics.rotationPods.WithLabelValues(m.signer, "stragglers").Set(float64(len(progress.Stragglers)))
	m.metrics.rotationPods.WithLabelValues(m.signer, "not_observable").Set(float64(len(progress.NotObservable)))
	floor := floorReason(progress, liveName(m.signer))
	if floor != "" {
		rot.MinWait = max(rot.MinWait, rot.Floor)
	}
	waitingFloor := floor != "" && m.clock.Now().Before(st.NextPublishedAt.Add(rot.Floor))
	behind := progress.ObjectsBehind()
	summary := fmt.Sprintf("%d/%d %s %s %v %v", progress.Holding, progress.Expected, describeObjects(behind), floor, progress.Skipped, progress.NotGranted)
	if summary != m.lastProgress && m.events != nil && (!progress.Done() || waitingFloor) {
		m.lastProgress = summary
		var why []string
		if progress.Holding < progress.Expected {
			why = append(why, fmt.Sprintf("%d of %d pods selecting %s hold it; not yet: %s", progress.Holding, progress.Expected, liveName(m.signer), describeStragglers(progress.Stragglers)))
		}
		if len(behind) > 0 {
			why = append(why, "objects written from "+liveName(m.signer)+" that do not all hold it: "+describeObjects(behind))
		}
		if waitingFloor {
			why = append(why, fmt.Sprintf("%s; waiting the floor of %s, until %s", floor, rot.Floor, st.NextPublishedAt.Add(rot.Floor).UTC().Format(time.RFC3339)))
		}
		if len(progress.Skipped) > 0 {
			why = append(why, fmt.Sprintf("not waiting for %s named in %s: %s", pods(len(progress.Skipped)), AnnotationSkipPods, describeStragglers(progress.Skipped)))
		}
		if len(progress.NotGranted) > 0 {
			why = append(why, fmt.Sprintf("not waiting for %s of namespaces not granted %s: %s", pods(len(progress.NotGranted)), liveName(m.signer), firstTen(progress.NotGranted, func(s string) string { return s })))
		}
		m.events.Eventf(secret, corev1.EventTypeNormal, "RotationWaiting", "The new CA (SHA-256 %s) waits to sign: %s", bundle.AnchorID(st.Next.Cert.Raw), strings.Join(why, "; "))
	}
	return rot, &progress, nil
}

// pods is "1 pod" or "N pods".
func pods(n int) string {
	if n == 1 {
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}

// floorReason says why a rotation waits its floor whatever it observes: some
// consumer of the bundle cannot be observed, or none is observed at all (seeing
// nobody is not everybody holding it); "" when every consumer is observed.
func floorReason(p query.Progress, bundleName string) string {
	switch {
	case len(p.NotObservable) > 0:
		return fmt.Sprintf("%s read %s where no one can observe it: %s", pods(len(p.NotObservable)), bundleName, describeStragglers(p.NotObservable))
	case len(p.Unobserved) > 0:
		return strings.Join(p.Unobserved, "; ")
	case p.Expected == 0:
		return "no pod is observed selecting " + bundleName + " (its consumers may read it in ways trustsync cannot see)"
	}
	return ""
}

// recordSwitch records on the CA Secret that the new CA signs now, and whether every
// pod had it, or whether that could be told at all.
func (m *caManager) recordSwitch(secret *corev1.Secret, st *caState, p *query.Progress, unobserved error) {
	m.lastProgress = ""
	m.metrics.rotationPods.DeletePartialMatch(prometheus.Labels{"signer": m.signer})
	if m.events == nil {
		return
	}
	ca := bundle.AnchorID(st.Current.Cert.Raw)
	switch {
	case unobserved != nil:
		m.events.Eventf(secret, corev1.EventTypeWarning, "RotationProceededUnobserved", "The new CA (SHA-256 %s) signs now, after the maximum wait of %s; whether it reached the pods could not be told: %v", ca, m.rotation.MaxWait, unobserved)
	case p == nil:
		m.events.Eventf(secret, corev1.EventTypeNormal, "RotationProceeded", "The new CA (SHA-256 %s) signs now: its propagation window has passed", ca)
	case p.Done() && floorReason(*p, liveName(m.signer)) != "":
		m.events.Eventf(secret, corev1.EventTypeNormal, "RotationProceeded", "The new CA (SHA-256 %s) signs now: all %d pods observed selecting %s hold it%s, and the floor of %s has passed for what cannot be observed (%s)",
			ca, p.Expected, liveName(m.signer), objectsHolding(p.Objects), m.rotation.Floor, floorReason(*p, liveName(m.signer)))
	case p.Done():
		m.events.Eventf(secret, corev1.EventTypeNormal, "RotationProceeded", "The new CA (SHA-256 %s) signs now: all %d pods selecting %s hold it%s", ca, p.Expected, liveName(m.signer), objectsHolding(p.Objects))
	default:
		var why []string
		if p.Holding < p.Expected {
			why = append(why, fmt.Sprintf("%d of %d pods selecting %s were not seen holding it: %s", len(p.Stragglers), p.Expected, liveName(m.signer), describeStragglers(p.Stragglers)))
		}
		if behind := p.ObjectsBehind(); len(behind) > 0 {
			why = append(why, "objects written from it do not all hold it: "+describeObjects(behind))
		}
		m.events.Eventf(secret, corev1.EventTypeWarning, "RotationProceededWithoutAllPods", "The new CA (SHA-256 %s) signs now, after the maximum wait of %s, though %s",
			ca, m.rotation.MaxWait, strings.Join(why, "; "))
	}
}

// rotationStatus is what the live bundle tells of the rotation of the CA kept in the
// Secret caSecret (namespace/name).
func rotationStatus(st *caState, rot rotation, caSecret string) bundle.RotationStatus {
	s := bundle.RotationStatus{Phase: string(st.phase()), Propagation: string(rot.Propagation), CurrentCA: bundle.AnchorID(st.Current.Cert.Raw), CurrentKey: st.Current.keyPlace(), CASecret: caSecret}
	if s.Propagation == "" {
		s.Propagation = string(PropagationTimed)
	}
	if st.Next != nil {
		s.NewCA, s.NewKey = bundle.AnchorID(st.Next.Cert.Raw), st.Next.keyPlace()
		s.SkipPods = st.SkipPods
	}
	if !st.NextPublishedAt.IsZero() {
		at, by := st.NextPublishedAt.UTC(), st.NextPublishedAt.Add(rot.wait()).UTC()
		s.PublishedAt, s.SignsBy = &at, &by
		if rot.Propagation == PropagationObserved {
			floor := st.NextPublishedAt.Add(max(rot.MinWait, rot.Floor)).UTC()
			s.FloorUntil = &floor
		}
	}
	return s
}

// bootstrap generates the signer's first CA and stores it. If another replica got
// there first, the create fails and the next reconcile reads theirs.
func (m *caManager) bootstrap(ctx context.Context, now time.Time) error {
	ca, err := generateCA(ctx, m.signer, now, m.validity, m.keys, true)
	if err != nil {
		return err
	}
	secret, err := newCASecret(m.namespace, m.secretName, m.signer, &caState{Current: ca, Managed: true, AnchorsChangedAt: now.Truncate(time.Second)})
	if err != nil {
		return err
	}
	if _, err := m.client.CoreV1().Secrets(m.namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("failed to create CA Secret %s/%s: %w", m.namespace, m.secretName, err)
	}
	klog.FromContext(ctx).Info("Generated a CA", "signer", m.signer, "secret", m.namespace+"/"+m.secretName, "notAfter", ca.Cert.NotAfter)
	// The informer delivers the Secret and the next reconcile publishes it.
	return nil
}

func (m *caManager) save(ctx context.Context, secret *corev1.Secret, st *caState) (*corev1.Secret, error) {
	updated := secret.DeepCopy()
	if err := applyToSecret(st, updated); err != nil {
		return nil, err
	}
	saved, err := m.client.CoreV1().Secrets(m.namespace).Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("failed to save the CA state in Secret %s/%s: %w", m.namespace, m.secretName, err)
	}
	return saved, nil
}
