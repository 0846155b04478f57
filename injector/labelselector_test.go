package injector

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// trustsync.io/label-selector takes what kubectl takes, != included, and selects what
// kubectl would select.
func TestParseLabelSelector_TakesKubectlsSyntax(t *testing.T) {
	for _, tc := range []struct {
		selector string
		matches  map[string]string
		refuses  map[string]string
	}{
		{"kubernetes.io/cluster-trust-bundle-version=live", map[string]string{"kubernetes.io/cluster-trust-bundle-version": "live"}, map[string]string{}},
		{"tier!=restricted", map[string]string{}, map[string]string{"tier": "restricted"}},
		{"env==prod,tier!=restricted", map[string]string{"env": "prod", "tier": "open"}, map[string]string{"env": "prod", "tier": "restricted"}},
		{"env in (prod, staging),!legacy", map[string]string{"env": "staging"}, map[string]string{"env": "prod", "legacy": "x"}},
		{"team notin (b),owner", map[string]string{"owner": "x"}, map[string]string{"owner": "x", "team": "b"}},
	} {
		t.Run(tc.selector, func(t *testing.T) {
			sel, err := parseLabelSelector(tc.selector)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			got, err := metav1.LabelSelectorAsSelector(sel)
			if err != nil {
				t.Fatal(err)
			}
			kubectl, err := labels.Parse(tc.selector)
			if err != nil {
				t.Fatal(err)
			}
			for _, set := range []map[string]string{tc.matches, tc.refuses} {
				if got.Matches(labels.Set(set)) != kubectl.Matches(labels.Set(set)) {
					t.Errorf("on %v: selects %v, kubectl %v", set, got.Matches(labels.Set(set)), kubectl.Matches(labels.Set(set)))
				}
			}
			if !got.Matches(labels.Set(tc.matches)) || got.Matches(labels.Set(tc.refuses)) {
				t.Errorf("selects %v: %v, %v: %v", tc.matches, got.Matches(labels.Set(tc.matches)), tc.refuses, got.Matches(labels.Set(tc.refuses)))
			}
		})
	}
	if _, err := parseLabelSelector("tier=!x"); err == nil {
		t.Error("a malformed selector was taken")
	}
}
