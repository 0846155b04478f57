package v1alpha1

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A report is believed for three of its heartbeats after it was written, no longer:
// its agent stopped or cannot write, and its pods may hold anything by now.
func TestStale_AReportIsBelievedForThreeOfItsHeartbeats(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		age       time.Duration
		heartbeat int64
		stale     string
	}{
		{name: "written now", age: 0},
		{name: "three default heartbeats old", age: 15 * time.Minute},
		{name: "just past three default heartbeats", age: 15*time.Minute + time.Second, stale: "more than 3 heartbeats (15m0s)"},
		{name: "400 days old", age: 400 * 24 * time.Hour, stale: "last written 9600h0m0s ago"},
		{name: "its own heartbeat of 10s: 31s is stale", age: 31 * time.Second, heartbeat: 10, stale: "(30s)"},
		{name: "its own heartbeat of an hour: two hours is current", age: 2 * time.Hour, heartbeat: 3600},
		{name: "written in the future (a skewed clock) is current", age: -time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &NodeTrustReport{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Node: "n1", UpdatedAt: metav1.NewTime(now.Add(-tc.age)), HeartbeatSeconds: tc.heartbeat}
			err := r.Stale(now)
			switch {
			case tc.stale == "" && err != nil:
				t.Fatalf("stale: %v", err)
			case tc.stale != "" && (err == nil || !strings.Contains(err.Error(), tc.stale) || !strings.Contains(err.Error(), "not observed")):
				t.Fatalf("%v, want stale saying %q", err, tc.stale)
			}
		})
	}
}
