package trustreport

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// A report is judged alike whether it was listed (unstructured) or decoded once by a
// watch's cache: a good report is used, a stale one and one that does not decode are
// named with why, and decoding keeps no managed fields.
func TestFromObjects_ListedOrDecodedReportsAreJudgedAlike(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	report := func(node string, updated time.Time) *unstructured.Unstructured {
		r := &v1alpha1.NodeTrustReport{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.NodeTrustReportKind},
			ObjectMeta: metav1.ObjectMeta{Name: node, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "trustsync-agent"}}},
			Node:       node, UpdatedAt: metav1.NewTime(updated)}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: m}
	}
	broken := report("broken", now)
	broken.Object["pods"] = "not a list"
	listed := []any{report("fresh", now.Add(-time.Minute)), report("old", now.Add(-24*time.Hour)), broken}
	var decoded []any
	for _, obj := range listed {
		d, err := Decode(obj)
		if err != nil {
			t.Fatal(err)
		}
		decoded = append(decoded, d)
	}
	if r, ok := decoded[0].(*v1alpha1.NodeTrustReport); !ok || r.ManagedFields != nil {
		t.Errorf("a decoded report is %T with managed fields %v, want a typed report without them", decoded[0], r)
	}
	for name, objs := range map[string][]any{"listed": listed, "decoded": decoded} {
		l := FromObjects(objs, now)
		if len(l.Reports) != 1 || l.Reports[0].Name != "fresh" {
			t.Errorf("%s: reports used %v, want fresh alone", name, l.Reports)
		}
		why := l.UnreadableByNode()
		if !strings.Contains(why["old"], "stale") || why["broken"] == "" || len(why) != 2 {
			t.Errorf("%s: unreadable %v, want old (stale) and broken named", name, why)
		}
	}
}
