package certificate

import (
	"context"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/kubeapi"
)

// How often a pending request is read: signers answer in milliseconds; a request left
// pending (a signer down, a person to approve it) is read every 30 s, so 10,000
// waiting pods cost the API server some 330 reads a second, not the 2,000 a 5-second
// cap would. (Jitter would spread them, but stretched the first reads too: start-up
// to certificate went from a median of 157 to 205 ms.)
const (
	csrPollFirst = 25 * time.Millisecond
	csrPollCap   = 30 * time.Second
)

// restCSRs is csrAPI over the sidecar's minimal REST client.
type restCSRs struct {
	c rest.Interface
	// poll is the first wait between reads of a pending request, doubling to pollCap.
	poll, pollCap time.Duration
}

func (r restCSRs) create(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) (*certificatesv1.CertificateSigningRequest, error) {
	out := &certificatesv1.CertificateSigningRequest{}
	return out, r.c.Post().Resource("certificatesigningrequests").Body(csr).Do(ctx).Into(out)
}

// waitDone reads the request by name until it is issued, denied or failed. It polls
// rather than watches on purpose: a watch, even of one name, needs list and watch on
// every CSR in the cluster (they are cluster-scoped), which would let any tenant
// enumerate everyone's requests; get by a name derived from the key and the pod (64
// unguessable bits) reveals nothing. Signers answer in milliseconds, so the first
// reads, 25 ms apart and doubling, find most answers (a start-up costs the same as it
// did with a watch, docs/benchmarks.md); a request that waits for a
// person's approval is read every pollCap. An API server outage only delays it.
func (r restCSRs) waitDone(ctx context.Context, name string) (*certificatesv1.CertificateSigningRequest, error) {
	var done *certificatesv1.CertificateSigningRequest
	err := kubeapi.Retry(ctx, r.poll, r.pollCap, func(ctx context.Context) (bool, error) {
		csr := &certificatesv1.CertificateSigningRequest{}
		err := r.c.Get().Resource("certificatesigningrequests").Name(name).Do(ctx).Into(csr)
		switch {
		case apierrors.IsNotFound(err):
			return false, fmt.Errorf("it was deleted before it was answered")
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
			// Waiting will not mend it: say so (the pod's Event), and retry later.
			return false, fmt.Errorf("cannot read it back (the pod's ServiceAccount needs get on certificatesigningrequests): %w", err)
		case err != nil:
			klog.V(2).InfoS("Cannot read the certificate request yet; retrying", "csr", name, "err", err)
			return false, nil
		case len(csr.Status.Certificate) > 0 || refusal(csr) != "":
			done = csr
			return true, nil
		}
		return false, nil
	})
	return done, err
}
