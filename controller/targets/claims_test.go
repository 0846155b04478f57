package targets

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/controller/objects"
)

// managed is a managedFields entry of manager applying fields.
func managed(manager, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationApply, FieldsV1: metav1.NewFieldsV1(fields)}
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
			w, others := writer(all, ns, objects.ConfigMap, "roots", tc.labelled)
			if w != tc.want || len(others) != len(tc.others) || (len(others) > 0 && others[0] != tc.others[0]) {
				t.Fatalf("writer = %s, others %v; want %s, %v", w, others, tc.want, tc.others)
			}
		})
	}
	if w, _ := writer(all, ns, objects.Secret, "roots", ""); w != "" {
		t.Errorf("a Secret of the same name is claimed by %s", w)
	}
}
