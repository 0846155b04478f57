package injector

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/tenancy"
)

// Asks lists everything a pod created in a namespace asks of trust, each way it can:
// its trustsync annotations (with the namespace's defaults; where they do not parse,
// Inject refuses the pod anyway), and volumes written by hand: projected
// clusterTrustBundle and podCertificate sources, and inline csi.trustsync.io volumes.
// Tenancy checks each against the namespace's grants; a pure function, like Inject.
func Asks(pod *corev1.Pod, nsAnnotations map[string]string, cfg Config) []tenancy.Ask {
	var asks []tenancy.Ask
	if pod.Annotations[v1alpha1.AnnotationInject] == "true" {
		if req, errs := parseRequest(effectiveAnnotations(pod.Annotations, nsAnnotations), cfg); len(errs) == 0 {
			asks = req.asks()
		}
	}
	return append(asks, VolumeAsks(pod)...)
}

// asks is what the annotations ask for: their sources, and a certificate.
func (req *request) asks() []tenancy.Ask {
	var asks []tenancy.Ask
	for i := range req.sources {
		asks = append(asks, tenancy.Ask{Where: "the pod's trustsync annotations", Source: &req.sources[i]})
	}
	if c := req.certificate; c != nil {
		asks = append(asks, tenancy.Ask{Where: "annotation " + AnnotationCertificateSigner, Signer: c.signer, DNSNames: c.dnsNames})
	}
	return asks
}

// VolumeAsks is what the pod's volumes written by hand ask for (Asks without the
// annotations, which Inject's Result carries once parsed).
func VolumeAsks(pod *corev1.Pod) []tenancy.Ask {
	var asks []tenancy.Ask
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.Projected != nil:
			for _, p := range v.Projected.Sources {
				switch {
				case p.ClusterTrustBundle != nil:
					ctb := p.ClusterTrustBundle
					src := v1alpha1.Source{Path: ctb.Path, LabelSelector: ctb.LabelSelector}
					if ctb.Name != nil {
						src.Name = *ctb.Name
					}
					if ctb.SignerName != nil {
						src.SignerName = *ctb.SignerName
					}
					asks = append(asks, tenancy.Ask{Where: fmt.Sprintf("volume %s (projected clusterTrustBundle)", v.Name), Source: &src})
				case p.PodCertificate != nil:
					asks = append(asks, tenancy.Ask{Where: fmt.Sprintf("volume %s (projected podCertificate)", v.Name), Signer: p.PodCertificate.SignerName})
				}
			}
		case v.CSI != nil && v.CSI.Driver == contract.CSIDriverName:
			spec, err := contract.SpecFromAttributes(v.CSI.VolumeAttributes, "/", "/")
			if err != nil {
				continue // the agent refuses to mount it, saying why
			}
			asks = append(asks, spec.Asks(fmt.Sprintf("volume %s (%s)", v.Name, contract.CSIDriverName))...)
		}
	}
	return asks
}
