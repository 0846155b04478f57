package targets

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// managed is a managedFields entry of manager applying fields.
func managed(manager, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationApply, FieldsV1: metav1.NewFieldsV1(fields)}
}

func TestObjectHolds_OnlyWhatAnApplyWouldLeaveUnchanged(t *testing.T) {
	ours := `{"f:data":{"f:ca.crt":{}},"f:binaryData":{"f:t.p12":{}},"f:metadata":{"f:labels":{"f:trustsync.io/target":{}}}}`
	cm := func(fields string, data map[string]string, labels map[string]string, entries ...metav1.ManagedFieldsEntry) object {
		c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: labels, ManagedFields: append([]metav1.ManagedFieldsEntry{managed(FieldManager, fields)}, entries...)},
			Data: data, BinaryData: map[string][]byte{"t.p12": []byte("store")}}
		o, _ := objectOf(c)
		return o
	}
	want := desired{data: map[string]string{"ca.crt": "PEM"}, binary: map[string][]byte{"t.p12": []byte("store")}, labels: map[string]string{v1alpha1.TargetLabel: "corp"}}
	label := map[string]string{v1alpha1.TargetLabel: "corp"}
	for _, tc := range []struct {
		name  string
		obj   object
		holds bool
	}{
		{name: "the same keys, values and label", obj: cm(ours, map[string]string{"ca.crt": "PEM"}, label), holds: true},
		{name: "another manager's key beside ours changes nothing", obj: cm(ours, map[string]string{"ca.crt": "PEM", "other": "x"}, label, managed("helm", `{"f:data":{"f:other":{}}}`)), holds: true},
		{name: "a value that differs", obj: cm(ours, map[string]string{"ca.crt": "OLD"}, label)},
		{name: "a key of ours the apply drops", obj: cm(`{"f:data":{"f:ca.crt":{},"f:gone.crt":{}},"f:binaryData":{"f:t.p12":{}},"f:metadata":{"f:labels":{"f:trustsync.io/target":{}}}}`, map[string]string{"ca.crt": "PEM", "gone.crt": "x"}, label)},
		{name: "the key held but owned by another manager", obj: cm(`{"f:binaryData":{"f:t.p12":{}},"f:metadata":{"f:labels":{"f:trustsync.io/target":{}}}}`, map[string]string{"ca.crt": "PEM"}, label)},
		{name: "another target's label", obj: cm(ours, map[string]string{"ca.crt": "PEM"}, map[string]string{v1alpha1.TargetLabel: "other"})},
		{name: "no managed fields at all", obj: func() object {
			o := cm(ours, map[string]string{"ca.crt": "PEM"}, label)
			o.meta.SetManagedFields(nil)
			return o
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.obj.holds(want, FieldManager); got != tc.holds {
				t.Fatalf("holds = %v; want %v", got, tc.holds)
			}
		})
	}
}

func TestCreatedByTargets_OnlyTheTargetsOwnMarker(t *testing.T) {
	marker := map[string]string{v1alpha1.CreatedAnnotation: "true"}
	for _, tc := range []struct {
		name    string
		meta    metav1.ObjectMeta
		created bool
	}{
		{name: "marked by the targets' manager", meta: metav1.ObjectMeta{Annotations: marker, ManagedFields: []metav1.ManagedFieldsEntry{managed(FieldManager, `{"f:metadata":{"f:annotations":{"f:trustsync.io/created":{}}}}`)}}, created: true},
		{name: "marked by a user", meta: metav1.ObjectMeta{Annotations: marker, ManagedFields: []metav1.ManagedFieldsEntry{managed("kubectl", `{"f:metadata":{"f:annotations":{"f:trustsync.io/created":{}}}}`)}}},
		{name: "not marked", meta: metav1.ObjectMeta{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := createdByTargets(&tc.meta); got != tc.created {
				t.Fatalf("created = %v; want %v", got, tc.created)
			}
		})
	}
}

func TestWriter_OneWriterPerObjectSettledTheSameWayByEveryone(t *testing.T) {
	target := func(name string, age time.Duration, object string, selector map[string]any) any {
		spec := map[string]any{"sources": []any{map[string]any{"defaultCAs": true, "path": "ca.crt"}}, "target": map[string]any{"configMap": map[string]any{"name": object}}}
		if selector != nil {
			spec["target"].(map[string]any)["namespaceSelector"] = map[string]any{"matchLabels": selector}
		}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "trustsync.io/v1alpha1", "kind": v1alpha1.TrustTargetKind, "spec": spec,
			"metadata": map[string]any{"name": name, "creationTimestamp": time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(age).Format(time.RFC3339)}}}
	}
	store := []any{
		target("young", 2*time.Hour, "roots", nil),
		target("old", time.Hour, "roots", nil),
		target("elsewhere", 0, "roots", map[string]any{"team": "b"}),
		target("apart", 0, "other", nil),
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"team": "a"}}}
	all := claims(store, func(string) bool { return false })
	for _, tc := range []struct {
		name, labelled, want string
		others               []string
	}{
		{name: "the oldest claimant writes a new object", want: "old", others: []string{"young"}},
		{name: "the object's writer keeps it, however young", labelled: "young", want: "young", others: []string{"old"}},
		{name: "a label of a target that no longer claims it counts for nothing", labelled: "gone", want: "old", others: []string{"young"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, others := writer(all, ns, "ConfigMap", "roots", tc.labelled)
			if w != tc.want || len(others) != len(tc.others) || (len(others) > 0 && others[0] != tc.others[0]) {
				t.Fatalf("writer = %s, others %v; want %s, %v", w, others, tc.want, tc.others)
			}
		})
	}
	if w, _ := writer(all, ns, "Secret", "roots", ""); w != "" {
		t.Errorf("a Secret of the same name is claimed by %s", w)
	}
}
