package webhook

import (
	"context"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/injector"
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

func (n *nativeAPIs) run(ctx context.Context, lister bundleapi.ResourceLister, interval time.Duration) {
	wait.UntilWithContext(ctx, func(context.Context) {
		list, err := lister.ServerResourcesForGroupVersion("certificates.k8s.io/v1")
		if err != nil && !n.discovered() {
			klog.ErrorS(err, "Cannot ask which native certificate APIs are served yet; retrying")
			return
		}
		var apis injector.NativeAPIs
		if list != nil {
			for _, r := range list.APIResources {
				switch r.Name {
				case "clustertrustbundles":
					apis.ClusterTrustBundles = true
				case "podcertificaterequests":
					apis.PodCertificates = true
				}
			}
		}
		if old := n.current.Swap(&apis); old == nil || *old != apis {
			klog.InfoS("Native certificate APIs for delivery native", "clusterTrustBundles", apis.ClusterTrustBundles, "podCertificateRequests", apis.PodCertificates)
		}
	}, interval)
}
