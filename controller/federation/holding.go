package federation

import (
	"context"
	"strings"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/trustreport"
	"github.com/trustsync/trustsync/trustreport/query"
)

// ReportsHolding answers, from the nodes' reports, how many pods selecting an
// imported bundle hold all of its anchors. The cluster's pods and reports are read at
// most once per MaxAge for all peers together: a fleet of peers refreshing every
// minute must not list every pod each time.
type ReportsHolding struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	MaxAge  time.Duration
	Clock   clock.PassiveClock

	mu      sync.Mutex
	read    time.Time
	cluster *query.Cluster
	// answers are those given from cluster, by anchors and bundles: a peer refreshing
	// every few seconds is answered without going through every pod again.
	answers map[string]v1alpha1.PodsHolding
}

// Holding is Config.Holding.
func (h *ReportsHolding) Holding(ctx context.Context, anchors []string, bundles []*certificatesv1.ClusterTrustBundle) (*v1alpha1.PodsHolding, bool) {
	if len(anchors) == 0 {
		return nil, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.snapshot(ctx)
	if c == nil {
		return nil, false
	}
	key := strings.Join(anchors, ",")
	for _, b := range bundles {
		key += "|" + b.Name
	}
	p, ok := h.answers[key]
	if !ok {
		p.Holding, p.Expected = c.HoldingAll(anchors, bundles)
		h.answers[key] = p
	}
	return &p, true
}

// snapshot is the cluster's pods and reports, read again when older than MaxAge;
// nil where no reports are served or they cannot be read. h.mu is held.
func (h *ReportsHolding) snapshot(ctx context.Context) *query.Cluster {
	now := h.Clock.Now()
	if h.cluster != nil && now.Sub(h.read) < h.MaxAge {
		return h.cluster
	}
	listing, err := trustreport.List(ctx, h.Dynamic)
	if err != nil || !listing.Served {
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot read the nodes' reports; pods holding a peer's anchors are not counted", "err", err)
		}
		return nil
	}
	pods, err := h.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot list pods; pods holding a peer's anchors are not counted", "err", err)
		return nil
	}
	c := &query.Cluster{Reports: listing.Reports, Unreadable: listing.UnreadableByNode()}
	for i := range pods.Items {
		c.Pods = append(c.Pods, &pods.Items[i])
	}
	h.cluster, h.read, h.answers = c, now, map[string]v1alpha1.PodsHolding{}
	return c
}
