package signer

import (
	"context"
	"fmt"
	"math/rand/v2"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/policy"
)

// pcrKey names one PodCertificateRequest of one signer in the work queue.
type pcrKey struct {
	signer, namespace, name string
}

// pcrSigner is one signer's PodCertificateRequests: its rules, its requests, its CA.
type pcrSigner struct {
	rules *policy.Signer
	pcrs  certlisters.PodCertificateRequestLister
	ca    *caManager
}

// pcrHandler issues, denies or fails the PodCertificateRequests of the policy's
// signers. Unlike a CSR, a PodCertificateRequest needs no approval: the API server has
// checked that the kubelet asking runs the pod it names, and the identity comes from
// that pod's ServiceAccount.
type pcrHandler struct {
	client  kubernetes.Interface
	signers map[string]*pcrSigner
	clock   clock.PassiveClock
	metrics *metrics
	// refreshAt draws the fraction of a certificate's lifetime after which the kubelet
	// refreshes it: spread over [0.6, 0.8) so a node's pods, started together, do not
	// all renew together.
	refreshAt func() float64
}

func (h *pcrHandler) handle(ctx context.Context, key pcrKey) error {
	ps, ok := h.signers[key.signer]
	if !ok {
		return nil
	}
	pcr, err := ps.pcrs.PodCertificateRequests(key.namespace).Get(key.name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pcr.Spec.SignerName != key.signer || decided(pcr) {
		return nil
	}
	start := h.clock.Now()
	ca := ps.ca.signingCA()
	if ca == nil {
		return errCANotReady
	}
	out, err := issuePCR(pcr, ps.rules, ca, start, h.refreshAt())
	if err != nil {
		return err
	}
	pcr = pcr.DeepCopy()
	pcr.Status = out.status
	if _, err := h.client.CertificatesV1().PodCertificateRequests(pcr.Namespace).UpdateStatus(ctx, pcr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("failed to write the status of PodCertificateRequest %s/%s: %w", pcr.Namespace, pcr.Name, err)
	}
	h.metrics.pcrs.WithLabelValues(key.signer, out.result, out.reason).Inc()
	logger := klog.FromContext(ctx).WithValues("podCertificateRequest", klog.KObj(pcr), "pod", pcr.Spec.PodName, "serviceAccount", pcr.Spec.ServiceAccountName)
	if out.result == "issued" {
		h.metrics.pcrLatency.WithLabelValues(key.signer).Observe(h.clock.Since(start).Seconds())
		logger.V(2).Info("Issued pod certificate", "notAfter", out.status.NotAfter, "beginRefreshAt", out.status.BeginRefreshAt)
		return nil
	}
	// The kubelet records the refusal on the pod, where its author looks.
	logger.Info("Refused pod certificate", "result", out.result, "reason", out.reason, "message", out.status.Conditions[0].Message)
	return nil
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

// servesPodCertificateRequests asks whether certificates.k8s.io/v1 serves
// PodCertificateRequests (Kubernetes 1.37 and later, or earlier with the beta API
// promoted by feature gates). Where it does not, the signer signs CSRs alone.
func servesPodCertificateRequests(client kubernetes.Interface) (bool, error) {
	list, err := client.Discovery().ServerResourcesForGroupVersion(certificatesv1.SchemeGroupVersion.String())
	if err != nil {
		return false, fmt.Errorf("failed to discover the certificates.k8s.io/v1 resources: %w", err)
	}
	for _, r := range list.APIResources {
		if r.Name == "podcertificaterequests" {
			return true, nil
		}
	}
	klog.InfoS("The API server does not serve certificates.k8s.io/v1 PodCertificateRequests; signing CSRs only")
	return false, nil
}

// requeueAllPCRs queues every PodCertificateRequest of signer, for when its first CA
// is loaded.
func requeueAllPCRs(lister certlisters.PodCertificateRequestLister, signer string, q workqueue.TypedRateLimitingInterface[pcrKey]) {
	pcrs, err := lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, pcr := range pcrs {
		q.Add(pcrKey{signer: signer, namespace: pcr.Namespace, name: pcr.Name})
	}
}
