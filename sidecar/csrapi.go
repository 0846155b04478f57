package sidecar

import (
	"context"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// restCSRs is csrAPI over the sidecar's minimal REST client.
type restCSRs struct{ c rest.Interface }

func (r restCSRs) create(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) (*certificatesv1.CertificateSigningRequest, error) {
	out := &certificatesv1.CertificateSigningRequest{}
	return out, r.c.Post().Resource("certificatesigningrequests").Body(csr).Do(ctx).Into(out)
}

// waitDone watches, not polls: client-go's UntilWithSync lists, watches, and re-lists
// after a dropped watch, so an API server restart mid-wait loses nothing.
func (r restCSRs) waitDone(ctx context.Context, name string) (*certificatesv1.CertificateSigningRequest, error) {
	lw := cache.NewListWatchFromClient(r.c, "certificatesigningrequests", metav1.NamespaceAll, fields.OneTermEqualSelector("metadata.name", name))
	ev, err := watchtools.UntilWithSync(ctx, lw, &certificatesv1.CertificateSigningRequest{}, nil, func(ev watch.Event) (bool, error) {
		csr, ok := ev.Object.(*certificatesv1.CertificateSigningRequest)
		return ok && (len(csr.Status.Certificate) > 0 || refusal(csr) != ""), nil
	})
	if err != nil {
		return nil, err
	}
	return ev.Object.(*certificatesv1.CertificateSigningRequest), nil
}
