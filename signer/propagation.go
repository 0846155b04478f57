package signer

import (
	"context"
	"fmt"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/trustreport"
	"github.com/trustsync/trustsync/trustreport/query"
)

// propagationGate says how far a new anchor has reached the pods that select the
// signer's bundle, from the nodes' reports. ok is false where no report can be read
// (the reports' API is not served: no agents), and a rotation then waits its timed
// window instead.
type propagationGate interface {
	progress(ctx context.Context, anchor string) (p query.Progress, ok bool, err error)
}

// reportsGate reads the reports, the pods and the signer's live bundles afresh on
// each call: it is asked only while a new CA waits, every few seconds.
type reportsGate struct {
	client    kubernetes.Interface
	dyn       dynamic.Interface
	publisher *publisher
}

func (g *reportsGate) progress(ctx context.Context, anchor string) (query.Progress, bool, error) {
	var c query.Cluster
	listing, err := trustreport.List(ctx, g.dyn)
	if err != nil || !listing.Served {
		return query.Progress{}, false, err
	}
	// A report that cannot be read leaves its node's pods not observed; the others
	// are still counted.
	c.Reports, c.Unreadable = listing.Reports, listing.UnreadableByNode()
	pods, err := g.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return query.Progress{}, false, fmt.Errorf("list pods: %w", err)
	}
	for i := range pods.Items {
		c.Pods = append(c.Pods, &pods.Items[i])
	}
	var live []*certificatesv1.ClusterTrustBundle
	for _, s := range g.publisher.stores {
		b, err := s.Get(ctx, liveName(g.publisher.signer))
		if err != nil {
			return query.Progress{}, false, fmt.Errorf("read the live bundle: %w", err)
		}
		live = append(live, b)
	}
	return c.Progress(anchor, live), true, nil
}

// describeStragglers names up to ten pods, with why, and how many more.
func describeStragglers(ss []query.Straggler) string {
	var names []string
	for i, s := range ss {
		if i == 10 {
			names = append(names, fmt.Sprintf("and %d more (kubectl trustsync rotation)", len(ss)-10))
			break
		}
		names = append(names, fmt.Sprintf("%s/%s (%s: %s)", s.Namespace, s.Pod, s.Reason, s.Detail))
	}
	return strings.Join(names, ", ")
}
