package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// NodeTrustReport's kind and resource.
const NodeTrustReportKind = "NodeTrustReport"

var NodeTrustReportResource = GroupVersion.WithResource("nodetrustreports")

// MaxReportBytes bounds a report's JSON. Pods and files always fit (110 pods, the kubelet's
// default maximum, with four trust files each take about 110 KiB); anchor sets
// beyond the budget keep their id and count but not their anchors (Elided).
const MaxReportBytes = 512 << 10

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

// NodeTrustReport is what the pods on node Node hold, as the node's agent observed
// it: one cluster-scoped object per node, named after it. Anchor sets are stored once
// and referred to by id, so a report grows with what differs on the node, not with
// its pods' anchors.
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
	// Elided: the anchors were left out to keep the report within MaxReportBytes.
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
	// SubPathContainer names the one container that reads the file through a
	// subPath mount: the kubelet never refreshes such a mount, so what it holds is
	// read from the container's own bind of the file, and it follows a rotation
	// only when the container restarts.
	SubPathContainer string `json:"subPathContainer,omitempty"`
}

// Bound elides the largest anchor sets until the report fits MaxReportBytes.
func (r *NodeTrustReport) Bound() {
	size := r.size()
	bySize := make([]int, len(r.AnchorSets))
	for i := range bySize {
		bySize[i] = i
	}
	slices.SortStableFunc(bySize, func(a, b int) int { return r.AnchorSets[b].Count - r.AnchorSets[a].Count })
	for _, i := range bySize {
		if size <= MaxReportBytes {
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

// AnchorSetID names a set of anchors (sorted): a digest, short as a git commit's.
func AnchorSetID(anchors []string) string {
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

// ToUnstructured encodes the report for a dynamic client.
func (r *NodeTrustReport) ToUnstructured() (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r)
	if err != nil {
		return nil, fmt.Errorf("encode NodeTrustReport %s: %w", r.Name, err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// NodeTrustReportFromUnstructured decodes a report read through a dynamic client, and checks what
// readers rely on: it is its node's (named after it), and its anchors are SHA-256s.
func NodeTrustReportFromUnstructured(u *unstructured.Unstructured) (*NodeTrustReport, error) {
	r, err := fromUnstructured[NodeTrustReport](u, "report of node %s unreadable")
	if err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("report of node %s unreadable: %w", u.GetName(), err)
	}
	return r, nil
}

// check refuses what the schema lets through (reports written before it said so)
// and readers cannot use.
func (r *NodeTrustReport) check() error {
	if r.Node != r.Name {
		return fmt.Errorf("it names node %q, not its own (%q)", r.Node, r.Name)
	}
	for _, s := range r.AnchorSets {
		for _, a := range s.Anchors {
			if !IsAnchorID(a) {
				return fmt.Errorf("anchor set %s holds %q, which is not a SHA-256 (64 lowercase hex digits)", s.ID, a)
			}
		}
	}
	return nil
}

// IsAnchorID reports whether id is an anchor's SHA-256 as reports write it.
func IsAnchorID(id string) bool {
	if len(id) != 64 {
		return false
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
