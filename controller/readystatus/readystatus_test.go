package readystatus

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// status is a status with conditions, as every trustsync kind's has.
type status struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	Count      int                `json:"count"`
}

var resource = schema.GroupVersionResource{Group: "trustsync.io", Version: "v1alpha1", Resource: "things"}

func object() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "trustsync.io/v1alpha1", "kind": "Thing", "metadata": map[string]any{"name": "one"}}}
}

func TestWrite_SendsWhatChangedAndSaysWhenReadyChanged(t *testing.T) {
	synced := Ready{OK: true, Reason: "Synced", Message: "all written"}
	failing := Ready{Reason: "WriteFailed", Message: "one namespace failed"}
	for _, tc := range []struct {
		name      string
		old       status
		count     int
		ready     Ready
		unchanged func() bool
		apiErr    error
		wantSent  bool
		wantEvent string
		wantErr   string
	}{
		{name: "becoming ready is sent and a Normal Event", ready: synced, wantSent: true, wantEvent: "Normal Synced all written"},
		{name: "becoming not ready is sent and a Warning Event", ready: failing, wantSent: true, wantEvent: "Warning WriteFailed one namespace failed"},
		{name: "the same condition and the same status send nothing and say nothing",
			old: status{Conditions: []metav1.Condition{synced.Condition(1)}}, ready: synced},
		{name: "the same condition with another status is sent, without an Event",
			old: status{Conditions: []metav1.Condition{synced.Condition(1)}}, count: 2, ready: synced, wantSent: true},
		{name: "a difference the caller calls unchanged is not sent",
			old: status{Conditions: []metav1.Condition{synced.Condition(1)}}, count: 2, ready: synced, unchanged: func() bool { return true }},
		{name: "a status written from an older version is an error, to retry",
			ready: synced, apiErr: apierrors.NewConflict(schema.GroupResource{Resource: "things"}, "one", errors.New("modified")), wantSent: true, wantEvent: "Normal Synced",
			wantErr: "the status of Thing one was written from an older version; retrying against the newer one"},
		{name: "an object deleted meanwhile is not an error",
			ready: synced, apiErr: apierrors.NewNotFound(schema.GroupResource{Resource: "things"}, "one"), wantSent: true, wantEvent: "Normal Synced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{resource: "ThingList"}, object())
			var updates int
			dyn.PrependReactor("update", "things", func(k8stesting.Action) (bool, runtime.Object, error) {
				updates++
				if tc.apiErr != nil {
					return true, nil, tc.apiErr
				}
				return false, nil, nil
			})
			events := record.NewFakeRecorder(10)
			w := Writer{Dynamic: dyn, Resource: resource, FieldManager: "test", Events: events}
			next := status{Conditions: append([]metav1.Condition(nil), tc.old.Conditions...), Count: tc.count}
			changed := Set(&next.Conditions, tc.ready, 1)
			sent, err := w.Write(context.Background(), object(), tc.old, &next, changed, tc.ready, tc.unchanged)
			if sent != tc.wantSent || (updates > 0) != tc.wantSent {
				t.Errorf("sent = %v after %d updates; want %v", sent, updates, tc.wantSent)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("err = %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("err = %v; want %q", err, tc.wantErr)
			}
			var got string
			select {
			case got = <-events.Events:
			default:
			}
			if !strings.HasPrefix(got, tc.wantEvent) || (tc.wantEvent == "") != (got == "") {
				t.Errorf("Event %q; want %q", got, tc.wantEvent)
			}
		})
	}
}

func TestReady_IsTheReadyConditionAtAGeneration(t *testing.T) {
	c := Ready{Reason: "SourceMissing", Message: "bundle corp not found"}.Condition(7)
	if c.Type != v1alpha1.ConditionReady || c.Status != metav1.ConditionFalse || c.Reason != "SourceMissing" || c.ObservedGeneration != 7 {
		t.Errorf("condition = %+v", c)
	}
	if c := (Ready{OK: true, Reason: "Synced"}).Condition(1); c.Status != metav1.ConditionTrue {
		t.Errorf("a ready condition is %s", c.Status)
	}
}
