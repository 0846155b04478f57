package objects

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// managed is a managedFields entry of manager applying fields.
// manager is a field manager's name, as a controller's is.
const manager = "trustsync-targets"

func managed(manager, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationApply, FieldsV1: metav1.NewFieldsV1(fields)}
}

func TestObjectHolds_OnlyWhatAnApplyWouldLeaveUnchanged(t *testing.T) {
	ours := `{"f:data":{"f:ca.crt":{}},"f:binaryData":{"f:t.p12":{}},"f:metadata":{"f:labels":{"f:trustsync.io/target":{}}}}`
	cm := func(fields string, data map[string]string, labels map[string]string, entries ...metav1.ManagedFieldsEntry) Object {
		c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: labels, ManagedFields: append([]metav1.ManagedFieldsEntry{managed(manager, fields)}, entries...)},
			Data: data, BinaryData: map[string][]byte{"t.p12": []byte("store")}}
		o, _ := ObjectOf(c)
		return o
	}
	want := Desired{Data: map[string]string{"ca.crt": "PEM"}, Binary: map[string][]byte{"t.p12": []byte("store")}, Labels: map[string]string{v1alpha1.TargetLabel: "corp"}}
	label := map[string]string{v1alpha1.TargetLabel: "corp"}
	for _, tc := range []struct {
		name  string
		obj   Object
		holds bool
	}{
		{name: "the same keys, values and label", obj: cm(ours, map[string]string{"ca.crt": "PEM"}, label), holds: true},
		{name: "another manager's key beside ours changes nothing", obj: cm(ours, map[string]string{"ca.crt": "PEM", "other": "x"}, label, managed("helm", `{"f:data":{"f:other":{}}}`)), holds: true},
		{name: "a value that differs", obj: cm(ours, map[string]string{"ca.crt": "OLD"}, label)},
		{name: "a key of ours the apply drops", obj: cm(`{"f:data":{"f:ca.crt":{},"f:gone.crt":{}},"f:binaryData":{"f:t.p12":{}},"f:metadata":{"f:labels":{"f:trustsync.io/target":{}}}}`, map[string]string{"ca.crt": "PEM", "gone.crt": "x"}, label)},
		{name: "the key held but owned by another manager", obj: cm(`{"f:binaryData":{"f:t.p12":{}},"f:metadata":{"f:labels":{"f:trustsync.io/target":{}}}}`, map[string]string{"ca.crt": "PEM"}, label)},
		{name: "another target's label", obj: cm(ours, map[string]string{"ca.crt": "PEM"}, map[string]string{v1alpha1.TargetLabel: "other"})},
		{name: "no managed fields at all", obj: func() Object {
			o := cm(ours, map[string]string{"ca.crt": "PEM"}, label)
			o.Meta.SetManagedFields(nil)
			return o
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.obj.Holds(want, manager); got != tc.holds {
				t.Fatalf("holds = %v; want %v", got, tc.holds)
			}
		})
	}
}

func TestRetryable_AFailureAnotherTryMayMendIsRetried(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"an outage is retried", apierrors.NewServiceUnavailable("etcd leader changed"), true},
		{"a refusal by quota or webhook is retried", apierrors.NewForbidden(gr, "roots", errors.New("exceeded quota")), true},
		{"a timeout is retried", apierrors.NewTimeoutError("slow", 1), true},
		{"a wrapped outage is retried", fmt.Errorf("ConfigMap a/roots: %w", apierrors.NewServiceUnavailable("x")), true},
		{"a field another manager owns waits for a change", FieldConflict(apierrors.NewConflict(gr, "roots", errors.New("kubectl-edit")), "another manager owns it"), false},
		{"an object too large waits for a change", TooLarge(map[string]string{"ca.pem": strings.Repeat("x", MaxObjectBytes+1)}, nil), false},
		{"an object gone waits for a change", apierrors.NewNotFound(gr, "roots"), false},
		{"no failure is nothing to retry", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Retryable(tc.err); got != tc.want {
				t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
