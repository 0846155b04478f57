package signer

import (
	"context"
	"errors"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/policy"
	"github.com/trustsync/trustsync/signer/keeper"
	"github.com/trustsync/trustsync/tenancy"
)

// signerRuntime is one signer: its rules, its CSRs, its CA.
type signerRuntime struct {
	rules *policy.Signer
	csrs  certlisters.CertificateSigningRequestLister
	ca    *caManager
}

// csrKey names one CSR of one signer in the work queue.
type csrKey struct {
	signer, name string
}

// csrHandler approves (when the signer's policy has approval rules) and signs.
type csrHandler struct {
	client  kubernetes.Interface
	signers map[string]*signerRuntime
	clock   clock.PassiveClock
	metrics *Metrics
	// grants, when set, enforces tenancy: what the requester's namespace is granted.
	grants tenancy.Lookup
	// seen is when each request in flight was first seen, for the request latency.
	seen *seenAt[csrKey]
	// events, when set, records on a CSR that it waits for its keeper.
	events record.EventRecorder
}

var errCANotReady = errors.New("the signing CA is not loaded yet")

// handle is the whole life of a CSR with this signer, as a flat pipeline: skip what is
// done or not ours; approve or deny when the policy says so; sign what is approved.
func (h *csrHandler) handle(ctx context.Context, key csrKey) error {
	sr, ok := h.signers[key.signer]
	if !ok {
		return nil
	}
	csr, err := sr.csrs.Get(key.name)
	if apierrors.IsNotFound(err) {
		h.seen.done(key)
		return nil
	}
	if err != nil {
		return err
	}
	if csr.Spec.SignerName != key.signer || len(csr.Status.Certificate) > 0 || hasCondition(csr, certificatesv1.CertificateFailed) || hasCondition(csr, certificatesv1.CertificateDenied) {
		h.seen.done(key)
		return nil
	}
	if !hasCondition(csr, certificatesv1.CertificateApproved) {
		if sr.rules.Approval == nil {
			// Another approver's business: the signer's clock starts at the approval.
			h.seen.done(key)
			return nil
		}
		return h.approveOrDeny(ctx, csr.DeepCopy(), sr)
	}
	return h.sign(ctx, csr.DeepCopy(), sr)
}

func (h *csrHandler) approveOrDeny(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, sr *signerRuntime) error {
	var d decision
	if req, err := parseRequest(csr.Spec.Request); err != nil {
		d = decision{message: err.Error()}
	} else {
		d = decide(csr, req, sr.rules.Domain, sr.rules.Approval)
		if namespace, _, ok := serviceAccount(csr.Spec.Username); ok && d.approve {
			// The policy allows it for every namespace; the namespace's grants narrow it.
			why, err := notGranted(ctx, h.grants, namespace, sr.rules.SignerName, req.DNSNames)
			if err != nil {
				return err
			}
			if why != "" {
				d = decision{message: why}
			}
		}
	}
	cond := certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: reasonDenied, Message: d.message,
		LastUpdateTime: metav1.NewTime(h.clock.Now()), LastTransitionTime: metav1.NewTime(h.clock.Now()),
	}
	result := "denied"
	if d.approve {
		cond.Type, cond.Reason, cond.Message, result = certificatesv1.CertificateApproved, reasonApproved, "Approved by trustsync: "+d.message, "approved"
	}
	csr.Status.Conditions = append(csr.Status.Conditions, cond)
	if _, err := h.client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("failed to record the decision on CertificateSigningRequest %q: %w", csr.Name, err)
	}
	h.metrics.csrs.WithLabelValues(sr.rules.SignerName, result, cond.Reason).Inc()
	if !d.approve {
		h.seen.done(csrKey{signer: sr.rules.SignerName, name: csr.Name})
	}
	klog.FromContext(ctx).V(2).Info("Decided on CSR", "csr", csr.Name, "requester", csr.Spec.Username, "result", result, "message", d.message)
	return nil
}

func (h *csrHandler) sign(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, sr *signerRuntime) error {
	start := h.clock.Now()
	ca := sr.ca.signingCA()
	if ca == nil {
		return errCANotReady
	}
	// The webhook applies the same duration rules at admission; the signer applies
	// them again, so nothing that reached it another way exceeds its maximum.
	req, err := policy.RequestedDuration(csr.Annotations, csr.Spec.ExpirationSeconds)
	if err != nil {
		return h.fail(ctx, csr, sr, &refusal{reason: "InvalidDuration", message: err.Error()})
	}
	dec := sr.rules.Decide(req)
	if dec.Refusal != "" {
		return h.fail(ctx, csr, sr, &refusal{reason: "DurationRefused", message: dec.Refusal})
	}
	// The grants again, whoever approved: an admin or another approver knows nothing
	// of TrustPolicies, and an approval outlives a withdrawn grant.
	if why, err := h.notGrantedAtSigning(ctx, csr, sr); err != nil || why != "" {
		if err != nil {
			return err
		}
		return h.fail(ctx, csr, sr, &refusal{reason: v1alpha1.ReasonNotGranted, message: why})
	}
	certPEM, _, err := sign(csr, ca, dec.Lifetime, start)
	if r, ok := asRefusal(err); ok {
		return h.fail(ctx, csr, sr, r)
	}
	var unavailable *keeper.UnavailableError
	if errors.As(err, &unavailable) {
		return h.waitForKey(ctx, csr, unavailable)
	}
	if err != nil {
		return err
	}
	csr.Status.Certificate = certPEM
	setWaiting(csr, corev1.ConditionFalse, v1alpha1.ReasonIssued, "Issued", h.clock.Now())
	if _, err := h.client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("failed to write the certificate of CertificateSigningRequest %q: %w", csr.Name, err)
	}
	h.metrics.csrs.WithLabelValues(sr.rules.SignerName, "signed", "").Inc()
	h.metrics.signLatency.WithLabelValues(sr.rules.SignerName).Observe(h.clock.Since(start).Seconds())
	if since, ok := h.seen.done(csrKey{signer: sr.rules.SignerName, name: csr.Name}); ok {
		h.metrics.requestLatency.WithLabelValues(sr.rules.SignerName, kindCSR).Observe(since.Seconds())
	}
	if req.Set {
		h.metrics.requested.WithLabelValues(sr.rules.SignerName).Inc()
		if !dec.Clamped {
			h.metrics.honored.WithLabelValues(sr.rules.SignerName).Inc()
		}
	}
	klog.FromContext(ctx).V(2).Info("Signed CSR", "csr", csr.Name, "requester", csr.Spec.Username, "lifetime", dec.Lifetime, "clamped", dec.Clamped)
	return nil
}

// notGrantedAtSigning is why the requester's namespace may not have this certificate,
// "" when it may: a ServiceAccount's namespace must be granted the signer and the DNS
// names. Others (users, nodes) belong to no namespace, and their approver decides. A
// request that does not parse is left to sign, which refuses it in its own words.
func (h *csrHandler) notGrantedAtSigning(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, sr *signerRuntime) (string, error) {
	namespace, _, ok := serviceAccount(csr.Spec.Username)
	if !ok {
		return "", nil
	}
	req, err := parseRequest(csr.Spec.Request)
	if err != nil {
		return "", nil
	}
	return notGranted(ctx, h.grants, namespace, sr.rules.SignerName, req.DNSNames)
}

// conditionWaiting is v1alpha1.ConditionWaiting on a CSR. (A PodCertificateRequest may
// carry no condition but its outcome: its wait is told by Events alone.)
const conditionWaiting = certificatesv1.RequestConditionType(v1alpha1.ConditionWaiting)

// waitForKey records on the CSR that its CA key's keeper cannot sign (the condition,
// when it changed, and an Event), and has it tried again: nothing is signed until the
// keeper answers, and nothing with another key.
func (h *csrHandler) waitForKey(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, unavailable *keeper.UnavailableError) error {
	msg := unavailable.Error() + "; the request waits and is signed once the keeper answers"
	if setWaiting(csr, corev1.ConditionTrue, v1alpha1.ReasonKeyUnavailable, msg, h.clock.Now()) {
		if _, err := h.client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("failed to record on CertificateSigningRequest %q that it waits for its keeper: %w", csr.Name, err)
		}
		if h.events != nil {
			h.events.Event(csr, corev1.EventTypeWarning, v1alpha1.ReasonKeyUnavailable, msg)
		}
	}
	return unavailable
}

// setWaiting sets the Waiting condition, and reports whether that changed it. A
// CSR that never waited gets no condition when it is issued.
func setWaiting(csr *certificatesv1.CertificateSigningRequest, status corev1.ConditionStatus, reason, message string, now time.Time) bool {
	for i := range csr.Status.Conditions {
		c := &csr.Status.Conditions[i]
		if c.Type != conditionWaiting {
			continue
		}
		if c.Status == status && c.Reason == reason && c.Message == message {
			return false
		}
		if c.Status != status {
			c.LastTransitionTime = metav1.NewTime(now)
		}
		c.Status, c.Reason, c.Message, c.LastUpdateTime = status, reason, message, metav1.NewTime(now)
		return true
	}
	if status != corev1.ConditionTrue {
		return false
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: conditionWaiting, Status: status, Reason: reason, Message: message, LastUpdateTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now),
	})
	return true
}

// fail marks the CSR Failed: it will not be signed, and its requester sees why.
func (h *csrHandler) fail(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, sr *signerRuntime, r *refusal) error {
	now := metav1.NewTime(h.clock.Now())
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateFailed, Status: corev1.ConditionTrue, Reason: r.reason, Message: r.message,
		LastUpdateTime: now, LastTransitionTime: now,
	})
	if _, err := h.client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("failed to mark CertificateSigningRequest %q Failed: %w", csr.Name, err)
	}
	h.metrics.csrs.WithLabelValues(sr.rules.SignerName, "failed", r.reason).Inc()
	h.seen.done(csrKey{signer: sr.rules.SignerName, name: csr.Name})
	klog.FromContext(ctx).Info("Refused to sign CSR", "csr", csr.Name, "requester", csr.Spec.Username, "reason", r.reason, "message", r.message)
	return nil
}

func hasCondition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == t && c.Status != corev1.ConditionFalse {
			return true
		}
	}
	return false
}
