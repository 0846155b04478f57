package webhook

import (
	"context"
	"sync/atomic"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/kubeapi"
)

// nativeAPIs keeps what the API server serves of the native APIs that delivery native
// needs, asked at start and every interval after, since a cluster upgrade can start
// serving them while the webhook runs.
type nativeAPIs struct {
	current atomic.Pointer[injector.NativeAPIs]
}

// get returns the last answer; before the first, neither API (delivery native is then
// refused, with the message saying which API is missing).
func (n *nativeAPIs) get() injector.NativeAPIs {
	if p := n.current.Load(); p != nil {
		return *p
	}
	return injector.NativeAPIs{}
}

// discovered reports whether the API server has answered once.
func (n *nativeAPIs) discovered() bool { return n.current.Load() != nil }

func (n *nativeAPIs) run(ctx context.Context, lister kubeapi.ResourceLister, interval time.Duration) {
	wait.UntilWithContext(ctx, func(context.Context) {
		served, err := kubeapi.ServedResources(lister, certificatesv1.SchemeGroupVersion.String())
		if err != nil {
			// An unanswered question keeps the last answer: an outage does not turn
			// delivery native off.
			klog.ErrorS(err, "Cannot ask which native certificate APIs are served; retrying", "haveAnswer", n.discovered())
			return
		}
		apis := injector.NativeAPIs{ClusterTrustBundles: served.Has("clustertrustbundles"), PodCertificates: served.Has("podcertificaterequests")}
		if old := n.current.Swap(&apis); old == nil || *old != apis {
			klog.InfoS("Native certificate APIs for delivery native", "clusterTrustBundles", apis.ClusterTrustBundles, "podCertificateRequests", apis.PodCertificates)
		}
	}, interval)
}
