package targets

import (
	"fmt"
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
	all := (&claimCache{}).claims(store, func(string) bool { return false })
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

// trustTarget is a stored TrustTarget writing ConfigMap object in the namespaces
// labelled team: the name, with a uid and resourceVersion as the API server gives.
func trustTarget(name, object, team, rv string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "trustsync.io/v1alpha1", "kind": v1alpha1.TrustTargetKind,
		"metadata": map[string]any{"name": name, "uid": "uid-" + name, "resourceVersion": rv, "creationTimestamp": "2026-01-01T00:00:00Z"},
		"spec": map[string]any{"sources": []any{map[string]any{"defaultCAs": true, "path": "ca.crt"}},
			"target": map[string]any{"configMap": map[string]any{"name": object}, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"team": team}}}}}}
}

// A target's claim is parsed again only when the target changed (its
// resourceVersion), not at every reconcile of every target.
func TestClaimCache_ParsesATargetAgainOnlyWhenItChanged(t *testing.T) {
	var cc claimCache
	none := func(string) bool { return false }
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"team": "a"}}}
	first := trustTarget("corp", "roots", "a", "1")
	if w, _ := writer(cc.claims([]any{first}, none), ns, objects.ConfigMap, "roots", ""); w != "corp" {
		t.Fatalf("writer %q, want corp", w)
	}
	// The same resourceVersion: what was parsed stands (a spec changed under an
	// unchanged version is what a cache cannot see, and the API server never does it).
	same := trustTarget("corp", "elsewhere", "a", "1")
	if w, _ := writer(cc.claims([]any{same}, none), ns, objects.ConfigMap, "roots", ""); w != "corp" {
		t.Errorf("the claim was parsed again at an unchanged resourceVersion: writer %q", w)
	}
	changed := trustTarget("corp", "elsewhere", "a", "2")
	set := cc.claims([]any{changed}, none)
	if w, _ := writer(set, ns, objects.ConfigMap, "roots", ""); w != "" {
		t.Errorf("a changed target still claims its former object: writer %q", w)
	}
	if w, _ := writer(set, ns, objects.ConfigMap, "elsewhere", ""); w != "corp" {
		t.Errorf("a changed target's new claim not seen: writer %q", w)
	}
	if set := cc.claims(nil, none); len(set) != 0 || len(cc.parsed) != 0 {
		t.Errorf("a deleted target is still kept: %v, %v", set, cc.parsed)
	}
}

// BenchmarkClaims_1000Targets is what a reconcile spends on every target's claim, at
// 1,000 targets: each parsed anew, or kept from the reconcile before.
func BenchmarkClaims_1000Targets(b *testing.B) {
	var store []any
	for i := range 1000 {
		store = append(store, trustTarget(fmt.Sprintf("target-%04d", i), fmt.Sprintf("roots-%d", i%50), fmt.Sprintf("team-%d", i%20), "1"))
	}
	none := func(string) bool { return false }
	b.Run("parsed every reconcile", func(b *testing.B) {
		for b.Loop() {
			(&claimCache{}).claims(store, none)
		}
	})
	b.Run("kept", func(b *testing.B) {
		var cc claimCache
		for b.Loop() {
			cc.claims(store, none)
		}
	})
}
