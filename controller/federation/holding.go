package federation

import (
	"context"
	"strings"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/trustreport/query"
	"github.com/trustsync/trustsync/trustreport/reader"
)

// ReportsHolding answers, from the read model every long-lived reader shares
// (trustreport/reader: pods, the nodes' reports and the objects trustsync writes,
// kept by watches), how many pods selecting an imported bundle hold all of its
// anchors. Answers are kept for MaxAge: a fleet of peers refreshing every few seconds
// does not go through every pod each time.
type ReportsHolding struct {
	Reader *reader.Reader
	MaxAge time.Duration
	Clock  clock.PassiveClock

	mu      sync.Mutex
	read    time.Time
	cluster *query.Cluster
	// answers are those given from cluster, by anchors and bundles.
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

// readWait bounds how long a refresh waits for the read model's first lists.
const readWait = 30 * time.Second

// snapshot is the read model, taken again when older than MaxAge; nil where no
// reports are served or they cannot be read. The watches start on the first call and
// run as long as ctx, the controller's. h.mu is held.
func (h *ReportsHolding) snapshot(ctx context.Context) *query.Cluster {
	now := h.Clock.Now()
	if h.cluster != nil && now.Sub(h.read) < h.MaxAge {
		return h.cluster
	}
	wait, cancel := context.WithTimeout(ctx, readWait)
	defer cancel()
	c, served, err := h.Reader.Cluster(wait, ctx)
	if err != nil || !served {
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot read the nodes' reports; pods holding a peer's anchors are not counted", "err", err)
		}
		return nil
	}
	h.cluster, h.read, h.answers = &c, now, map[string]v1alpha1.PodsHolding{}
	return h.cluster
}
