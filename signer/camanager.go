package signer

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
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
	clock      clock.PassiveClock
	metrics    *metrics

	current atomic.Pointer[CA]
	// loaded, when set, runs when the signing CA changes (CSRs waiting for one can go).
	loaded func()
}

// signingCA returns the CA to sign with, or nil before the first reconcile.
func (m *caManager) signingCA() *CA { return m.current.Load() }

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
	st, err := stateFromSecret(secret)
	if err != nil {
		// Never overwrite a Secret we cannot read: it may hold the only copy of a key.
		return 0, fmt.Errorf("cannot use the CA: %w; fix or delete the Secret", err)
	}

	before := st.phase()
	changed, next, err := st.advance(now, m.rotation, func(t time.Time) (*CA, error) { return generateCA(m.signer, t, m.validity) })
	if err != nil {
		return 0, err
	}
	if changed {
		if secret, err = m.save(ctx, secret, st); err != nil {
			return 0, err
		}
	}
	if err := m.publisher.publish(ctx, st.anchors()); err != nil {
		return 0, err
	}
	if st.markPublished(now) {
		if _, err = m.save(ctx, secret, st); err != nil {
			return 0, err
		}
		next = st.nextDeadline(m.rotation)
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
	return max(next.Sub(now), time.Second), nil
}

// bootstrap generates the signer's first CA and stores it. If another replica got
// there first, the create fails and the next reconcile reads theirs.
func (m *caManager) bootstrap(ctx context.Context, now time.Time) error {
	ca, err := generateCA(m.signer, now, m.validity)
	if err != nil {
		return err
	}
	secret, err := newCASecret(m.namespace, m.secretName, m.signer, &caState{Current: ca, Managed: true})
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
