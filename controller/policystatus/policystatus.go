// Package policystatus keeps each TrustPolicy's status true: how many namespaces it
// selects now, which of its bundle grants refer to nothing that exists yet, and a
// Ready condition (InvalidSpec, Unresolved or Resolved). It reads what the grant
// cache watches already (the policies, the namespaces' labels, the bundles' names and
// labels) and writes only a status that changed.
package policystatus

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/kubeapi/queue"
	"github.com/trustsync/trustsync/tenancy"
)

// FieldManager is the status writer's name in the policies' managedFields.
const FieldManager = "trustsync-policies"

// Source is what the status is computed from: the grant cache.
type Source interface {
	OnChange(func())
	HasSynced() bool
	PolicyObjects() []*unstructured.Unstructured
	NamespaceLabels() []map[string]string
	Bundles() []tenancy.Bundle
}

// Writer writes every TrustPolicy's status.
type Writer struct {
	source Source
	dyn    dynamic.Interface
	events record.EventRecorder
	queue  workqueue.TypedRateLimitingInterface[string]
}

// New returns a writer over source; call before the source runs, so that no change
// is missed.
func New(source Source, dyn dynamic.Interface, events record.EventRecorder) *Writer {
	w := &Writer{source: source, dyn: dyn, events: events,
		queue: queue.New[string]("trustsync_policies")}
	// One key for all: any change may change any policy's count or resolution, and
	// the queue coalesces a burst of changes into one pass.
	source.OnChange(func() { w.queue.Add(allPolicies) })
	return w
}

const allPolicies = "*"

// Run writes statuses until ctx is done.
func (w *Writer) Run(ctx context.Context) {
	defer w.queue.ShutDown()
	w.queue.Add(allPolicies)
	queue.Work(ctx, w.queue, 1, "TrustPolicy status", w.sync)
	<-ctx.Done()
}

func (w *Writer) sync(ctx context.Context, _ string) (time.Duration, error) {
	if !w.source.HasSynced() {
		return time.Second, nil
	}
	namespaces, bundles := w.source.NamespaceLabels(), w.source.Bundles()
	var errs []error
	for _, u := range w.source.PolicyObjects() {
		if err := w.write(ctx, u, namespaces, bundles); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return 0, fmt.Errorf("%d TrustPolicy statuses not written, first: %w", len(errs), errs[0])
	}
	return 0, nil
}

// Of is the status a policy should have, its Ready condition among its conditions.
func Of(p *v1alpha1.TrustPolicy, namespaces []map[string]string, bundles []tenancy.Bundle) v1alpha1.TrustPolicyStatus {
	parsed := tenancy.Parse([]*v1alpha1.TrustPolicy{p})[0]
	status := v1alpha1.TrustPolicyStatus{ObservedGeneration: p.Generation, Conditions: slices.Clone(p.Status.Conditions)}
	cond := metav1.Condition{Type: v1alpha1.ConditionReady, ObservedGeneration: p.Generation}
	status.Namespaces, status.Unresolved = tenancy.Status(parsed, namespaces, bundles)
	switch {
	case parsed.Err != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, "grants nothing: "+parsed.Err.Error()
	case len(status.Unresolved) > 0:
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonUnresolved
		cond.Message = fmt.Sprintf("grants to %d namespaces; granted all the same, but refers to nothing yet: %s", status.Namespaces, status.Unresolved[0])
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonResolved
		cond.Message = fmt.Sprintf("grants to %d namespaces; every grant refers to something that exists", status.Namespaces)
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	return status
}

func (w *Writer) write(ctx context.Context, u *unstructured.Unstructured, namespaces []map[string]string, bundles []tenancy.Bundle) error {
	p, err := v1alpha1.TrustPolicyFromUnstructured(u)
	if err != nil {
		return err
	}
	status := Of(p, namespaces, bundles)
	if equal(p.Status, status) {
		return nil
	}
	was := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady)
	now := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionReady)
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
	if err != nil {
		return err
	}
	updated := u.DeepCopy()
	updated.Object["status"] = m
	_, err = w.dyn.Resource(v1alpha1.TrustPolicyResource).UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: FieldManager})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // a newer version comes with its own change
	}
	if err == nil && (was == nil || was.Reason != now.Reason) && now.Reason != v1alpha1.ReasonResolved {
		w.events.Event(u, corev1.EventTypeWarning, now.Reason, now.Message)
	}
	return err
}

func equal(a, b v1alpha1.TrustPolicyStatus) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
