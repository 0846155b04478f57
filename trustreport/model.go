// Package trustreport is the NodeTrustReport: what the pods on one node hold, as the node's
// agent observed it, one cluster-scoped object per node named after it. Anchor sets
// are stored once and referred to by id, so a report grows with what differs on the
// node, not with its pods' anchors.
package trustreport

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group, version and resource of the reports.
var (
	GroupVersion = schema.GroupVersion{Group: "trustsync.io", Version: "v1alpha1"}
	Resource     = GroupVersion.WithResource("nodetrustreports")
)

// Kind is the reports' kind.
const Kind = "NodeTrustReport"

// MaxBytes bounds a report's JSON. Pods and files always fit (110 pods, the kubelet's
// default maximum, with four trust files each take about 110 KiB); anchor sets
// beyond the budget keep their id and count but not their anchors (Elided).
const MaxBytes = 512 << 10

// DefaultHeartbeat is the agent's default heartbeat, assumed for a report that does
// not say its own.
const DefaultHeartbeat = 5 * time.Minute

// StaleHeartbeats is how many heartbeats a report may go unwritten before readers
// stop believing it: its agent stopped, or cannot write, and its pods may hold
// anything by now.
const StaleHeartbeats = 3

// Stale says, when the report is older than StaleHeartbeats of its heartbeats at now,
// why it is not believed; nil when it is current.
func (r *NodeTrustReport) Stale(now time.Time) error {
	heartbeat := DefaultHeartbeat
	if r.HeartbeatSeconds > 0 {
		heartbeat = time.Duration(r.HeartbeatSeconds) * time.Second
	}
	age := now.Sub(r.UpdatedAt.Time)
	if age <= StaleHeartbeats*heartbeat {
		return nil
	}
	return fmt.Errorf("report of node %s is stale: last written %s ago, more than %d heartbeats (%s); its agent stopped or cannot write, so its pods are not observed",
		r.Name, age.Round(time.Second), StaleHeartbeats, StaleHeartbeats*heartbeat)
}

// NodeTrustReport is what the pods on node Node hold.
type NodeTrustReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Node string `json:"node"`
	// UpdatedAt is when the agent last wrote the report: on a change, and at least
	// every Heartbeat, so an old one tells of an agent that stopped.
	UpdatedAt metav1.Time `json:"updatedAt"`
	// HeartbeatSeconds is how often the agent writes the report when nothing
	// changed: a report not written for StaleHeartbeats of them is stale (absent:
	// DefaultHeartbeat, as agents before it wrote).
	HeartbeatSeconds int64        `json:"heartbeatSeconds,omitempty"`
	AnchorSets       []AnchorSet  `json:"anchorSets,omitempty"`
	Pods             []PodHolding `json:"pods,omitempty"`
}

// AnchorSet is a set of anchors some trust file on the node holds.
type AnchorSet struct {
	// ID names the set in this report (a digest of its anchors).
	ID string `json:"id"`
	// Anchors are each anchor's SHA-256, hex, sorted; empty when Elided.
	Anchors []string `json:"anchors,omitempty"`
	Count   int      `json:"count"`
	// Elided: the anchors were left out to keep the report within MaxBytes.
	Elided bool `json:"elided,omitempty"`
}

// PodHolding is what one pod holds.
type PodHolding struct {
	Namespace string        `json:"namespace"`
	Name      string        `json:"name"`
	UID       string        `json:"uid"`
	Files     []FileHolding `json:"files"`
}

// FileHolding is what one trust file of a pod holds.
type FileHolding struct {
	// Path is where the app reads the file; Volume and File where it is kept.
	Path     string `json:"path"`
	Volume   string `json:"volume"`
	File     string `json:"file"`
	Delivery string `json:"delivery"`
	// AnchorSet is the id of the set the file holds; empty when it could not be
	// read, and Error says why.
	AnchorSet string `json:"anchorSet,omitempty"`
	// ChangedAt is when the file was last written, to the microsecond: the
	// deliveries' latencies are read from it.
	ChangedAt *metav1.MicroTime `json:"changedAt,omitempty"`
	Error     string            `json:"error,omitempty"`
}

// Bound elides the largest anchor sets until the report fits MaxBytes.
func (r *NodeTrustReport) Bound() {
	size := r.size()
	bySize := make([]int, len(r.AnchorSets))
	for i := range bySize {
		bySize[i] = i
	}
	slices.SortStableFunc(bySize, func(a, b int) int { return r.AnchorSets[b].Count - r.AnchorSets[a].Count })
	for _, i := range bySize {
		if size <= MaxBytes {
			return
		}
		s := &r.AnchorSets[i]
		size -= s.Count * (sha256.Size*2 + 3)
		s.Anchors, s.Elided = nil, true
	}
}

func (r *NodeTrustReport) size() int {
	data, _ := json.Marshal(r)
	return len(data)
}

// SetID names a set of anchors (sorted): a digest, short as a git commit's.
func SetID(anchors []string) string {
	h := sha256.New()
	for _, a := range anchors {
		h.Write([]byte(a))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Set returns the anchor set with id.
func (r *NodeTrustReport) Set(id string) (AnchorSet, bool) {
	i, ok := slices.BinarySearchFunc(r.AnchorSets, id, func(s AnchorSet, id string) int { return strings.Compare(s.ID, id) })
	if !ok {
		return AnchorSet{}, false
	}
	return r.AnchorSets[i], true
}

// SameHoldings reports whether two reports say the same of their pods, their write
// times and heartbeats aside: a report is written again only when this is false, or to
// heartbeat.
func SameHoldings(a, b *NodeTrustReport) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.ObjectMeta, y.ObjectMeta = metav1.ObjectMeta{}, metav1.ObjectMeta{}
	x.UpdatedAt, y.UpdatedAt = metav1.Time{}, metav1.Time{}
	x.HeartbeatSeconds, y.HeartbeatSeconds = 0, 0
	dx, _ := json.Marshal(x)
	dy, _ := json.Marshal(y)
	return string(dx) == string(dy)
}
