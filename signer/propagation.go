package signer

import (
	"context"
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/tenancy"
	"github.com/trustsync/trustsync/trustreport/query"
	"github.com/trustsync/trustsync/trustreport/reader"
)

// propagationGate says how far a new anchor has reached the pods that select the
// signer's bundle, from the nodes' reports. ok is false where no report can be read
// (the reports' API is not served: no agents), and a rotation then waits its timed
// window instead.
type propagationGate interface {
	progress(ctx context.Context, anchor string) (p query.Progress, ok bool, err error)
}

// reportsGate answers from the reader's watches (started by the first rotation that
// waits) and the live bundle as the publisher's watch holds it: a rotation waiting at
// ten thousand pods costs the API server the watches, not a list every few seconds.
type reportsGate struct {
	reader    *reader.Reader
	runCtx    context.Context
	publisher *publisher
	// grants, when tenancy is enforced, tells what each namespace is granted: a pod
	// of a namespace not granted the bundle is not waited for (whatever it says of
	// itself, it may not trust the bundle through trustsync).
	grants tenancy.Lookup
}

func (g *reportsGate) progress(ctx context.Context, anchor string) (query.Progress, bool, error) {
	c, served, err := g.reader.Cluster(ctx, g.runCtx)
	if err != nil || !served {
		return query.Progress{}, false, err
	}
	live, err := g.publisher.liveBundles()
	if err != nil {
		return query.Progress{}, false, err
	}
	if c.Grants, err = grantsOf(ctx, g.grants, c.Pods); err != nil {
		return query.Progress{}, false, err
	}
	return c.Progress(anchor, live), true, nil
}

// grantsOf is what the namespaces of pods are granted, for the read model (nil
// without enforcement). A namespace left out is waited for as any other: an exempt
// one, and one whose grants cannot be told (going, or not listed yet), since a
// rotation must never stop waiting for pods it is unsure of.
func grantsOf(ctx context.Context, lookup tenancy.Lookup, pods []*corev1.Pod) (map[string]tenancy.Grants, error) {
	if lookup == nil {
		return nil, nil
	}
	out := map[string]tenancy.Grants{}
	seen := map[string]bool{}
	for _, pod := range pods {
		if seen[pod.Namespace] {
			continue
		}
		seen[pod.Namespace] = true
		g, exempt, err := lookup(ctx, pod.Namespace)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot tell what a namespace is granted; its pods are waited for", "namespace", pod.Namespace, "err", err)
			continue
		}
		if !exempt {
			out[pod.Namespace] = g
		}
	}
	return out, nil
}

// describeStragglers names up to ten pods, with why, and how many more.
func describeStragglers(ss []query.Straggler) string {
	return firstTen(ss, func(s query.Straggler) string {
		return fmt.Sprintf("%s/%s (%s: %s)", s.Namespace, s.Pod, s.Reason, s.Detail)
	})
}

// describeObjects names up to ten objects' progress, with why, and how many more.
func describeObjects(os []query.ObjectProgress) string {
	return firstTen(os, func(o query.ObjectProgress) string {
		if o.Writer == v1alpha1.WriterAnnotation {
			return fmt.Sprintf("annotated %s %s (%s)", o.Kind, path.Join(o.Namespace, o.Name), o.Detail)
		}
		return fmt.Sprintf("%s %s of %s in %d of %d namespaces (%s)", o.Kind, o.Name, o.Writer, o.Holding, o.Expected, o.Detail)
	})
}

// firstTen names up to ten items, and how many more there are: an Event stays
// readable, and the rest is one command away.
func firstTen[T any](items []T, name func(T) string) string {
	var names []string
	for i, item := range items {
		if i == 10 {
			names = append(names, fmt.Sprintf("and %d more (kubectl trustsync rotation)", len(items)-10))
			break
		}
		names = append(names, name(item))
	}
	return strings.Join(names, ", ")
}

// objectsHolding is ", and the N objects written from it" where there are any.
func objectsHolding(os []query.ObjectProgress) string {
	n := 0
	for _, o := range os {
		n += o.Expected
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", and so do the %d objects TrustTargets write from it", n)
}
