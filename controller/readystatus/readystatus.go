// Package readystatus writes a trustsync object's status the one way its controllers
// do: the Ready condition set among the object's conditions, the status sent only
// when it differs from what the object holds, an Event when the Ready condition
// changed (Warning while it is False, Normal when it is True), and one conflict
// policy: a status the API server refuses as out of date is retried against the
// newer version, never dropped.
package readystatus

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/record"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/controller/objects"
)

// Ready is how a reconcile ended: the Ready condition's status, reason and message.
type Ready struct {
	OK              bool
	Reason, Message string
}

// Condition is r as the Ready condition of an object at generation.
func (r Ready) Condition(generation int64) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: r.Reason, Message: r.Message, ObservedGeneration: generation}
	if r.OK {
		c.Status = metav1.ConditionTrue
	}
	return c
}

// Writer writes the status of one resource's objects.
type Writer struct {
	Dynamic      dynamic.Interface
	Resource     schema.GroupVersionResource
	FieldManager string
	Events       record.EventRecorder
	// Echoes, when set, records each status write (under StatusKey of the object's
	// name), so that its controller can tell the write's own watch event from a
	// change; Requeue is then told of a change that came while the write was in
	// flight.
	Echoes  *objects.Echoes
	Requeue func(name string)
}

// StatusKey names the status of object name among the Echoes: what the controller's
// event handler asks Echoes about.
func (w Writer) StatusKey(name string) string {
	return "status/" + w.Resource.Resource + "/" + name
}

// Set makes ready the Ready condition among conditions (a copy of the object's, in
// the new status), and says whether the condition changed.
func Set(conditions *[]metav1.Condition, ready Ready, generation int64) bool {
	return meta.SetStatusCondition(conditions, ready.Condition(generation))
}

// Write writes status (a pointer to the kind's status), whose conditions hold the
// Ready condition ready, in place of old, the status u holds: nothing is sent when
// they are equal, or when unchanged says they differ by nothing worth a write. When
// the Ready condition changed, an Event says so on u. A missing object is not an
// error (its deletion is reconciled next); a conflict is, so the key is retried
// against the newer version. sent says whether the status was sent.
func (w Writer) Write(ctx context.Context, u *unstructured.Unstructured, old, status any, readyChanged bool, ready Ready, unchanged func() bool) (sent bool, err error) {
	if readyChanged {
		typ := corev1.EventTypeNormal
		if !ready.OK {
			typ = corev1.EventTypeWarning
		}
		w.Events.Event(u, typ, ready.Reason, ready.Message)
	}
	if equal(old, status) || unchanged != nil && unchanged() {
		return false, nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return false, err
	}
	updated := u.DeepCopy()
	updated.Object["status"] = m
	if w.Echoes != nil {
		w.Echoes.Writing(w.StatusKey(u.GetName()))
	}
	written, err := w.Dynamic.Resource(w.Resource).UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: w.FieldManager})
	if w.Echoes != nil {
		rv := ""
		if err == nil {
			rv = written.GetResourceVersion()
		}
		if w.Echoes.Wrote(w.StatusKey(u.GetName()), rv) {
			w.Requeue(u.GetName())
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case apierrors.IsConflict(err):
		return true, fmt.Errorf("the status of %s %s was written from an older version; retrying against the newer one: %w", u.GetKind(), u.GetName(), err)
	}
	return true, err
}

// equal compares two statuses as the API server stores them.
func equal(a, b any) bool {
	x, errX := json.Marshal(a)
	y, errY := json.Marshal(b)
	return errX == nil && errY == nil && string(x) == string(y)
}
