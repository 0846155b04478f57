package reader

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/trustfiles"
	"github.com/trustsync/trustsync/trustreport"
	"github.com/trustsync/trustsync/trustreport/query"
)

// Once reads the read model one time, for a short-lived reader (kubectl trustsync)
// with its user's credentials: the pods of namespace ("" for every one), the nodes'
// reports, and the objects trustsync writes (learnt from the TrustTargets and the
// namespaces' labels, and from the controller's index of annotated objects, found by
// its label in any namespace). What it may not read but can do without is left out
// and said through warn, so that the answer says what it could not see; pods that
// cannot be listed are an error. Long-lived readers use Reader, which keeps the same
// model by watches.
func Once(ctx context.Context, core kubernetes.Interface, dyn dynamic.Interface, namespace string, warn func(string)) (query.Cluster, error) {
	var c query.Cluster
	pods, err := core.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return c, fmt.Errorf("list pods: %w", err)
	}
	for i := range pods.Items {
		c.Pods = append(c.Pods, &pods.Items[i])
	}
	// Where no agent reports (the CRD is not installed), every file is not observed;
	// a report that cannot be read is named, and its node's pods are not observed.
	listing, err := trustreport.List(ctx, dyn)
	if err != nil {
		return c, err
	}
	c.Reports, c.Unreadable = listing.Reports, listing.UnreadableByNode()
	for _, u := range listing.Unreadable {
		warn(u.Err)
	}
	if c.Objects, c.Targets, err = listObjects(ctx, core, dyn, warn); err != nil {
		return c, err
	}
	if c.Injected = listInjected(ctx, core, warn); c.Injected != nil {
		if c.Objects == nil {
			c.Objects = trustfiles.Objects{}
		}
		c.Objects.AddInjected(c.Injected)
	}
	return c, nil
}

// listObjects learns which ConfigMaps and Secrets trustsync writes from the
// TrustTargets and the namespaces' labels, as TrustObjects does; none where
// TrustTargets are not served.
func listObjects(ctx context.Context, core kubernetes.Interface, dyn dynamic.Interface, warn func(string)) (trustfiles.Objects, []*v1alpha1.TrustTarget, error) {
	forbidden := func(err error) (trustfiles.Objects, []*v1alpha1.TrustTarget, error) {
		warn("TrustTargets' ConfigMaps and Secrets, and the pods reading them, are not counted: " + err.Error())
		return nil, nil, nil
	}
	list, err := dyn.Resource(v1alpha1.TrustTargetResource).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if apierrors.IsForbidden(err) {
		return forbidden(err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list TrustTargets: %w", err)
	}
	var targets []*v1alpha1.TrustTarget
	for i := range list.Items {
		if t, err := v1alpha1.TrustTargetFromUnstructured(&list.Items[i]); err == nil {
			targets = append(targets, t)
		}
	}
	nss, err := core.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		return forbidden(err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list namespaces: %w", err)
	}
	namespaces := make([]*metav1.PartialObjectMetadata, len(nss.Items))
	for i := range nss.Items {
		namespaces[i] = &metav1.PartialObjectMetadata{ObjectMeta: nss.Items[i].ObjectMeta}
	}
	return trustfiles.FromTargets(targets, namespaces), targets, nil
}

// listInjected reads the controller's index of annotated objects (every ConfigMap
// labelled v1alpha1.InjectedIndexLabel, one per installation), as the agents and the
// signer do; nil where there is none, or the user may not list ConfigMaps (said).
func listInjected(ctx context.Context, core kubernetes.Interface, warn func(string)) *v1alpha1.InjectedIndex {
	list, err := core.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.InjectedIndexLabel + "=true"})
	if err != nil {
		warn(fmt.Sprintf("the controller's index of annotated objects (the ConfigMap labelled %s) not read, so the pods mounting annotated ConfigMaps and Secrets are not counted: %s", v1alpha1.InjectedIndexLabel, err))
		return nil
	}
	var out *v1alpha1.InjectedIndex
	for _, cm := range list.Items {
		if cm.Data[v1alpha1.InjectedIndexKey] == "" {
			continue // not written yet
		}
		idx, err := v1alpha1.ParseInjectedIndex(cm.Data[v1alpha1.InjectedIndexKey])
		if err != nil {
			idx = &v1alpha1.InjectedIndex{Unreadable: err.Error()}
		}
		if idx.Unreadable != "" {
			warn(fmt.Sprintf("ConfigMap %s/%s: %s", cm.Namespace, cm.Name, idx.Unreadable))
		}
		if out == nil {
			out = idx
			continue
		}
		out.Objects, out.Omitted = append(out.Objects, idx.Objects...), out.Omitted+idx.Omitted
		if out.Unreadable == "" {
			out.Unreadable = idx.Unreadable
		}
	}
	return out
}
