package agent

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/trustsync/trustsync/agent/holdings"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/trustreport"
)

// node makes pods pods of files trust files each; set(p, f) is the anchors pod p's
// file f holds.
func node(pods, files int, set func(p, f int) []string) []holdings.Pod {
	var held []holdings.Pod
	for p := range pods {
		hp := holdings.Pod{Namespace: "apps", Name: fmt.Sprintf("pod-%03d", p), UID: types.UID(fmt.Sprintf("uid-%03d", p))}
		for f := range files {
			hp.Files = append(hp.Files, holdings.File{
				TrustFile: injector.TrustFile{Delivery: injector.DeliveryNode, Volume: "trustsync-anchors", File: fmt.Sprintf("ca-%d.pem", f),
					MountPaths: []string{fmt.Sprintf("/var/run/trust-anchors/ca-%d.pem", f)}},
				Anchors: set(p, f), ChangedAt: time.Unix(1700000000, 0),
			})
		}
		held = append(held, hp)
	}
	return held
}

func anchors(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = bundle.AnchorID(fmt.Appendf(nil, "%s-%d", prefix, i))
	}
	return out
}

func TestBuild_StoresEachAnchorSetOnceAndStaysWithinItsBound(t *testing.T) {
	shared := anchors("public roots", 150)
	for _, tc := range []struct {
		name       string
		held       []holdings.Pod
		wantSets   int
		wantElided bool
	}{
		{name: "110 pods (the kubelet's most) holding the same 150 roots in 4 files: one set",
			held: node(110, 4, func(int, int) []string { return shared }), wantSets: 1},
		{name: "110 pods each holding its own 150 anchors in 4 files: within the bound, the largest sets' anchors left out",
			held: node(110, 4, func(p, f int) []string { return anchors(fmt.Sprint(p, f), 150) }), wantSets: 440, wantElided: true},
		{name: "an empty node", held: nil, wantSets: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := BuildReport("node-1", tc.held, time.Now())
			data, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if len(data) > trustreport.MaxBytes {
				t.Errorf("the report is %d bytes, over its bound of %d", len(data), trustreport.MaxBytes)
			}
			if len(r.AnchorSets) != tc.wantSets {
				t.Errorf("%d anchor sets, want %d", len(r.AnchorSets), tc.wantSets)
			}
			elided := false
			for _, s := range r.AnchorSets {
				elided = elided || s.Elided
				if !s.Elided && len(s.Anchors) != s.Count {
					t.Errorf("set %s lists %d anchors, counts %d", s.ID, len(s.Anchors), s.Count)
				}
			}
			if elided != tc.wantElided {
				t.Errorf("elided: %v, want %v", elided, tc.wantElided)
			}
			if len(r.Pods) != len(tc.held) {
				t.Fatalf("%d pods reported, want %d: pods are never left out", len(r.Pods), len(tc.held))
			}
			for _, p := range r.Pods {
				for _, f := range p.Files {
					if _, ok := r.Set(f.AnchorSet); !ok {
						t.Errorf("%s/%s %s refers to set %q, which the report lacks", p.Namespace, p.Name, f.Path, f.AnchorSet)
					}
				}
			}
			t.Logf("%d pods: %d bytes", len(r.Pods), len(data))
		})
	}
}

func TestSameHoldings_IgnoresWhenTheReportWasWritten(t *testing.T) {
	held := node(3, 1, func(int, int) []string { return anchors("x", 2) })
	a, b := BuildReport("n", held, time.Now()), BuildReport("n", held, time.Now().Add(time.Hour))
	if !trustreport.SameHoldings(a, b) {
		t.Error("two reports of the same holdings an hour apart differ")
	}
	held[1].Files[0].Anchors = anchors("y", 2)
	if trustreport.SameHoldings(a, BuildReport("n", held, time.Now())) {
		t.Error("a pod holding other anchors is the same report")
	}
}
