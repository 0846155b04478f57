package signer

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"math/rand/v2"

	certificatesv1 "k8s.io/api/certificates/v1"
	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	certlistersv1beta1 "k8s.io/client-go/listers/certificates/v1beta1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/kubeapi"
	"github.com/trustsync/trustsync/policy"
	"github.com/trustsync/trustsync/signer/keeper"
	"github.com/trustsync/trustsync/tenancy"
)

// pcrKey names one PodCertificateRequest of one signer in the work queue.
type pcrKey struct {
	signer, namespace, name string
}

// pcrSigner is one signer's PodCertificateRequests: its rules, its requests (from the
// v1 API, or from v1beta1 where only that is served), its CA.
type pcrSigner struct {
	rules    *policy.Signer
	pcrs     certlisters.PodCertificateRequestLister
	betaPCRs certlistersv1beta1.PodCertificateRequestLister
	ca       *caManager
}

// pcrHandler issues, denies or fails the PodCertificateRequests of the policy's
// signers. Unlike a CSR, a PodCertificateRequest needs no approval: the API server has
// checked that the kubelet asking runs the pod it names, and the identity comes from
// that pod's ServiceAccount.
type pcrHandler struct {
	client  kubernetes.Interface
	signers map[string]*pcrSigner
	clock   clock.PassiveClock
	metrics *Metrics
	// refreshAt draws the fraction of a certificate's lifetime after which the kubelet
	// refreshes it: spread over [0.6, 0.8) so a node's pods, started together, do not
	// all renew together.
	refreshAt func() float64
	// grants, when set, enforces tenancy: what the pod's namespace is granted.
	grants tenancy.Lookup
	// seen is when each request in flight was first seen, for the request latency.
	seen *seenAt[pcrKey]
	// events, when set, records on a request that it waits for its keeper.
	events record.EventRecorder
}

func (h *pcrHandler) handle(ctx context.Context, key pcrKey) error {
	ps, ok := h.signers[key.signer]
	if !ok {
		return nil
	}
	pcr, pub, why, beta, err := ps.get(key)
	if apierrors.IsNotFound(err) {
		h.seen.done(key)
		return nil
	}
	if err != nil {
		return err
	}
	if pcr.Spec.SignerName != key.signer || decided(pcr) {
		h.seen.done(key)
		return nil
	}
	start := h.clock.Now()
	ca := ps.ca.signingCA()
	if ca == nil {
		return errCANotReady
	}
	// The namespace's grants first: nothing is signed for a namespace not granted it.
	var out pcrOutcome
	dnsNames, _ := requestedDNSNames(pcr, ps.rules)
	refusal, err := notGranted(ctx, h.grants, pcr.Namespace, ps.rules.SignerName, dnsNames)
	if err != nil {
		return err
	}
	if refusal != "" {
		out = terminal(pcr, certificatesv1.PodCertificateRequestConditionTypeDenied, v1alpha1.ReasonNotGranted, refusal, start)
	} else if out, err = decidePCR(pcr, pub, why, ps.rules, ca, start, h.refreshAt()); err != nil {
		var unavailable *keeper.UnavailableError
		if errors.As(err, &unavailable) && h.events != nil {
			// The kubelet shows a pod's PodCertificateRequest Events where its
			// author looks; the request itself may carry no waiting condition.
			h.events.Event(pcr, corev1.EventTypeWarning, v1alpha1.ReasonKeyUnavailable, unavailable.Error()+"; the request waits and is issued once the keeper answers")
		}
		return err
	}
	if beta != nil {
		beta = beta.DeepCopy()
		beta.Status = certificatesv1beta1.PodCertificateRequestStatus{
			Conditions: out.status.Conditions, CertificateChain: out.status.CertificateChain,
			NotBefore: out.status.NotBefore, BeginRefreshAt: out.status.BeginRefreshAt, NotAfter: out.status.NotAfter,
		}
		_, err = h.client.CertificatesV1beta1().PodCertificateRequests(beta.Namespace).UpdateStatus(ctx, beta, metav1.UpdateOptions{})
	} else {
		pcr = pcr.DeepCopy()
		pcr.Status = out.status
		_, err = h.client.CertificatesV1().PodCertificateRequests(pcr.Namespace).UpdateStatus(ctx, pcr, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("failed to write the status of PodCertificateRequest %s/%s: %w", pcr.Namespace, pcr.Name, err)
	}
	h.metrics.pcrs.WithLabelValues(key.signer, out.result, out.reason).Inc()
	since, seen := h.seen.done(key)
	logger := klog.FromContext(ctx).WithValues("podCertificateRequest", klog.KObj(pcr), "pod", pcr.Spec.PodName, "serviceAccount", pcr.Spec.ServiceAccountName)
	if out.result == "issued" {
		h.metrics.pcrLatency.WithLabelValues(key.signer).Observe(h.clock.Since(start).Seconds())
		if seen {
			h.metrics.requestLatency.WithLabelValues(key.signer, kindPCR).Observe(since.Seconds())
		}
		logger.V(2).Info("Issued pod certificate", "notAfter", out.status.NotAfter, "beginRefreshAt", out.status.BeginRefreshAt)
		return nil
	}
	// The kubelet records the refusal on the pod, where its author looks.
	logger.Info("Refused pod certificate", "result", out.result, "reason", out.reason, "message", out.status.Conditions[0].Message)
	return nil
}

// get reads the request named by key as a v1 request with its public key (or why it
// has none). A v1beta1 request is returned as well, to write its status back through
// its own version.
func (ps *pcrSigner) get(key pcrKey) (*certificatesv1.PodCertificateRequest, crypto.PublicKey, string, *certificatesv1beta1.PodCertificateRequest, error) {
	if ps.betaPCRs == nil {
		pcr, err := ps.pcrs.PodCertificateRequests(key.namespace).Get(key.name)
		if err != nil {
			return nil, nil, "", nil, err
		}
		pub, why := stubRequestKey(pcr.Spec.StubPKCS10Request)
		return pcr, pub, why, nil, nil
	}
	beta, err := ps.betaPCRs.PodCertificateRequests(key.namespace).Get(key.name)
	if err != nil {
		return nil, nil, "", nil, err
	}
	// A v1beta1 request carries the stub request (Kubernetes 1.36) or, deprecated, a
	// PKIX public key with a proof of possession (1.35).
	if len(beta.Spec.StubPKCS10Request) > 0 {
		pub, why := stubRequestKey(beta.Spec.StubPKCS10Request)
		return v1FromBeta(beta), pub, why, beta, nil
	}
	//lint:ignore SA1019 the v1beta1 API of Kubernetes 1.35 carries the key only here.
	pub, why := pkixKey(beta.Spec.PKIXPublicKey, beta.Spec.ProofOfPossession, string(beta.Spec.PodUID))
	return v1FromBeta(beta), pub, why, beta, nil
}

// v1FromBeta is a v1beta1 request in v1 form, its key fields aside (v1 has none).
func v1FromBeta(b *certificatesv1beta1.PodCertificateRequest) *certificatesv1.PodCertificateRequest {
	return &certificatesv1.PodCertificateRequest{
		ObjectMeta: b.ObjectMeta,
		Spec: certificatesv1.PodCertificateRequestSpec{
			SignerName: b.Spec.SignerName, PodName: b.Spec.PodName, PodUID: b.Spec.PodUID,
			ServiceAccountName: b.Spec.ServiceAccountName, ServiceAccountUID: b.Spec.ServiceAccountUID,
			NodeName: b.Spec.NodeName, NodeUID: b.Spec.NodeUID, MaxExpirationSeconds: b.Spec.MaxExpirationSeconds,
			UnverifiedUserAnnotations: b.Spec.UnverifiedUserAnnotations,
		},
		Status: certificatesv1.PodCertificateRequestStatus{
			Conditions: b.Status.Conditions, CertificateChain: b.Status.CertificateChain,
			NotBefore: b.Status.NotBefore, BeginRefreshAt: b.Status.BeginRefreshAt, NotAfter: b.Status.NotAfter,
		},
	}
}

// decided reports whether the request carries a terminal condition already: it is
// immutable from then on.
func decided(pcr *certificatesv1.PodCertificateRequest) bool {
	for _, c := range pcr.Status.Conditions {
		switch c.Type {
		case certificatesv1.PodCertificateRequestConditionTypeIssued, certificatesv1.PodCertificateRequestConditionTypeDenied, certificatesv1.PodCertificateRequestConditionTypeFailed:
			return true
		}
	}
	return false
}

func spreadRefresh() float64 { return 0.6 + 0.2*rand.Float64() }

// podCertificateRequestVersion asks which version of certificates.k8s.io serves
// PodCertificateRequests: v1 (Kubernetes 1.37 and later), else v1beta1 (1.35 and
// 1.36 with the beta API enabled), else none, and the signer signs CSRs alone.
func podCertificateRequestVersion(client kubernetes.Interface) (string, error) {
	for _, gv := range []schema.GroupVersion{certificatesv1.SchemeGroupVersion, certificatesv1beta1.SchemeGroupVersion} {
		ok, err := kubeapi.Serves(client.Discovery(), gv.WithResource("podcertificaterequests"))
		if err != nil {
			return "", err
		}
		if ok {
			return gv.String(), nil
		}
	}
	klog.InfoS("The API server serves no PodCertificateRequests (certificates.k8s.io v1 or v1beta1); signing CSRs only")
	return "", nil
}

// requeueAll queues every PodCertificateRequest of the signer, for when its first CA
// is loaded.
func (ps *pcrSigner) requeueAll(signer string, q workqueue.TypedRateLimitingInterface[pcrKey]) {
	var keys []pcrKey
	if ps.betaPCRs != nil {
		pcrs, _ := ps.betaPCRs.List(labels.Everything())
		for _, pcr := range pcrs {
			keys = append(keys, pcrKey{signer: signer, namespace: pcr.Namespace, name: pcr.Name})
		}
	} else if ps.pcrs != nil {
		pcrs, _ := ps.pcrs.List(labels.Everything())
		for _, pcr := range pcrs {
			keys = append(keys, pcrKey{signer: signer, namespace: pcr.Namespace, name: pcr.Name})
		}
	}
	for _, k := range keys {
		q.Add(k)
	}
}
