package v1alpha1

import (
	"bytes"
	"container/heap"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The injected index: the objects annotation injection fills (annotated ConfigMaps,
// Secrets and caBundle fields), published by the controller as one ConfigMap in its
// namespace, so that the node agent and the signer know which ConfigMaps and Secrets
// trust is read from, and what each caBundle holds, with no right to read any
// ConfigMap, Secret or webhook configuration themselves. The agent and the signer may
// read that one ConfigMap, by name.
const (
	// InjectedIndexName is the ConfigMap's default name.
	InjectedIndexName = "trustsync-injected"
	// InjectedIndexLabel marks the index (value "true"), wherever it is named.
	InjectedIndexLabel = "trustsync.io/injected-index"
	// InjectedIndexKey is its one key: an InjectedIndex as JSON.
	InjectedIndexKey = "objects.json"
	// MaxInjectedIndexBytes bounds the JSON, under a ConfigMap's 1 MiB: about 3,700
	// objects holding two anchors each. Objects beyond it are counted in Omitted.
	MaxInjectedIndexBytes = 900 << 10
	// WriterAnnotation is the writer an annotated object is listed under.
	WriterAnnotation = "annotation"
)

// InjectedIndex lists what annotation injection fills.
type InjectedIndex struct {
	Objects []InjectedObject `json:"objects"`
	// Omitted objects are filled but not listed (the index reached
	// MaxInjectedIndexBytes): their readers are not observed, and a rotation waits
	// its floor for them.
	Omitted int `json:"omitted,omitempty"`
	// Unreadable says why a reader could not read the index, or some of its objects
	// (never written): what it says is not observed.
	Unreadable string `json:"-"`
}

// InjectedObject is one filled object as last written.
type InjectedObject struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Sources are what its annotations name; each path is a key of the object (of a
	// caBundle kind, the one PEM its caBundle fields hold).
	Sources []Source `json:"sources"`
	// Anchors are the anchors (bundle.AnchorID) the written content holds, sorted.
	Anchors []string `json:"anchors,omitempty"`
}

// Ref is "Kind namespace/name", or "Kind name" for a cluster-scoped object.
func (o InjectedObject) Ref() string {
	if o.Namespace == "" {
		return o.Kind + " " + o.Name
	}
	return o.Kind + " " + o.Namespace + "/" + o.Name
}

// EncodeInjectedIndex encodes as many objects as fit in MaxInjectedIndexBytes,
// counting the rest as omitted, in order of kind, namespace and name: the same objects
// always give the same bytes, so an unchanged index is never written again.
//
// Which objects fit is decided fairly, since one tenant's annotations must not push
// every other namespace's objects out of observation and out of a rotation's count:
// the cluster-scoped caBundle objects (which only cluster admins annotate) first and
// always, then the namespaces' objects by max-min fairness in bytes: the namespace
// that holds the fewest bytes so far adds its next object, until none fits. A
// namespace with more than its share loses its own objects beyond it, never another's.
func EncodeInjectedIndex(objects []InjectedObject) (string, int) {
	const room = 64 // for the closing and the omitted count
	key := func(o InjectedObject) string { return o.Kind + "\x00" + o.Namespace + "\x00" + o.Name }
	sorted := slices.Clone(objects)
	slices.SortFunc(sorted, func(a, b InjectedObject) int { return strings.Compare(key(a), key(b)) })
	encoded := make([][]byte, len(sorted))
	for i, o := range sorted {
		b, err := json.Marshal(o)
		if err != nil {
			panic(err) // plain structs always marshal
		}
		encoded[i] = b
	}
	size := len(`{"objects":[]}`) + room
	fits := func(i int) bool { return size+len(encoded[i])+1 <= MaxInjectedIndexBytes }
	chosen := make([]bool, len(sorted))
	byNamespace := map[string][]int{}
	var namespaces []string
	for i, o := range sorted {
		if o.Namespace == "" {
			if fits(i) {
				chosen[i], size = true, size+len(encoded[i])+1
			}
			continue
		}
		if _, ok := byNamespace[o.Namespace]; !ok {
			namespaces = append(namespaces, o.Namespace)
		}
		byNamespace[o.Namespace] = append(byNamespace[o.Namespace], i)
	}
	// Water-filling: the namespace holding the fewest bytes (then the first by name)
	// adds its next object; one whose next object does not fit is done.
	h := &fairShares{}
	for _, ns := range namespaces {
		h.items = append(h.items, &share{namespace: ns, next: byNamespace[ns]})
	}
	heap.Init(h)
	for h.Len() > 0 {
		sh := h.items[0]
		i := sh.next[0]
		if !fits(i) {
			heap.Pop(h)
			continue
		}
		chosen[i], size, sh.held = true, size+len(encoded[i])+1, sh.held+len(encoded[i])+1
		if sh.next = sh.next[1:]; len(sh.next) == 0 {
			heap.Pop(h)
		} else {
			heap.Fix(h, 0)
		}
	}
	var buf bytes.Buffer
	buf.WriteString(`{"objects":[`)
	n := 0
	for i := range sorted {
		if !chosen[i] {
			continue
		}
		if n > 0 {
			buf.WriteByte(',')
		}
		buf.Write(encoded[i])
		n++
	}
	buf.WriteString("]")
	if omitted := len(sorted) - n; omitted > 0 {
		fmt.Fprintf(&buf, `,"omitted":%d`, omitted)
	}
	buf.WriteString("}")
	return buf.String(), len(sorted) - n
}

// share is one namespace's part of the index: the bytes it holds, and its objects
// not yet placed, in order.
type share struct {
	namespace string
	held      int
	next      []int
}

// fairShares orders namespaces by the bytes they hold, then by name.
type fairShares struct{ items []*share }

func (h *fairShares) Len() int { return len(h.items) }
func (h *fairShares) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	return a.held < b.held || (a.held == b.held && a.namespace < b.namespace)
}
func (h *fairShares) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *fairShares) Push(x any)    { h.items = append(h.items, x.(*share)) }
func (h *fairShares) Pop() any {
	last := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return last
}

// ParseInjectedIndex reads the index's JSON: an error where it is not an index at
// all. An object that does not read (no kind or name, invalid sources, a bad anchor
// ID) is left out and the others kept; Unreadable then names the first and how many.
func ParseInjectedIndex(data string) (*InjectedIndex, error) {
	dec := json.NewDecoder(strings.NewReader(data))
	dec.DisallowUnknownFields()
	var idx InjectedIndex
	if err := dec.Decode(&idx); err != nil {
		return nil, fmt.Errorf("the injected index is not an index's JSON: %w", err)
	}
	var bad []error
	idx.Objects = slices.DeleteFunc(idx.Objects, func(o InjectedObject) bool {
		err := checkInjectedObject(o)
		if err != nil {
			bad = append(bad, err)
		}
		return err != nil
	})
	switch {
	case len(bad) == 1:
		idx.Unreadable = bad[0].Error()
	case len(bad) > 1:
		idx.Unreadable = fmt.Sprintf("%v, and %d more objects", bad[0], len(bad)-1)
	}
	return &idx, nil
}

func checkInjectedObject(o InjectedObject) error {
	if o.Kind == "" || o.Name == "" {
		return fmt.Errorf("the injected index lists an object without a kind or name (%q %q)", o.Kind, o.Name)
	}
	if errs := ValidateSources(o.Sources, nil); len(errs) > 0 {
		return fmt.Errorf("the injected index's %s: %w", o.Ref(), errs.ToAggregate())
	}
	for _, a := range o.Anchors {
		if !IsAnchorID(a) {
			return fmt.Errorf("the injected index's %s holds %q, which is not an anchor ID", o.Ref(), a)
		}
	}
	return nil
}

// ParseInjectedIndexRef reads the --injected-index flag: "NAMESPACE/NAME", or "" for
// none.
func ParseInjectedIndexRef(s string) (types.NamespacedName, error) {
	if s == "" {
		return types.NamespacedName{}, nil
	}
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("--injected-index %q: want NAMESPACE/NAME of the ConfigMap the controller lists annotated objects in (the chart's is RELEASE-NAMESPACE/%s), or empty for none", s, InjectedIndexName)
	}
	for _, e := range append(validation.IsDNS1123Label(ns), validation.IsDNS1123Subdomain(name)...) {
		return types.NamespacedName{}, fmt.Errorf("--injected-index %q: %s", s, e)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// DefaultInjectedIndex is the index in namespace ("" where namespace is not known).
func DefaultInjectedIndex(namespace string) string {
	if namespace == "" {
		return ""
	}
	return namespace + "/" + InjectedIndexName
}
