package injector

import (
	"encoding/json"
	"fmt"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
)

// PatchOp is one RFC 6902 operation. The injector emits only "add".
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// patch collects add operations. Appending to a list that the pod does not have adds
// the whole list; one it has gets "/-" appends. Nothing is ever replaced or removed,
// so fields the injector's compiled types do not know are never touched.
type patch struct {
	ops []PatchOp
}

func (p *patch) add(path string, value any) {
	p.ops = append(p.ops, PatchOp{Op: "add", Path: path, Value: value})
}

// appendItems adds items to the list at path; exists says whether the pod has it.
func appendItems[T any](p *patch, path string, exists bool, items ...T) {
	if len(items) == 0 {
		return
	}
	if !exists {
		p.add(path, items)
		return
	}
	for _, item := range items {
		p.add(path+"/-", item)
	}
}

// pointerEscaper escapes a map key for a JSON pointer (RFC 6901). A Replacer builds
// its tables on first use, so it is made once: one per call was a tenth of the bytes
// /mutate/pods allocated.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func escapeKey(k string) string { return pointerEscaper.Replace(k) }

// JSON encodes the patch for an admission response.
func (r *Result) JSON() ([]byte, error) {
	return json.Marshal(r.Patch)
}

// Apply returns pod with the patch applied, through a JSON round trip exactly as the
// API server applies it. Tests and tooling use it; the webhook sends the patch.
func (r *Result) Apply(pod *corev1.Pod) (*corev1.Pod, error) {
	if len(r.Patch) == 0 {
		return pod.DeepCopy(), nil
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	patched, err := r.ApplyJSON(raw)
	if err != nil {
		return nil, err
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(patched, out); err != nil {
		return nil, err
	}
	return out, nil
}

// ApplyJSON applies the patch to a pod in JSON.
func (r *Result) ApplyJSON(raw []byte) ([]byte, error) {
	encoded, err := r.JSON()
	if err != nil {
		return nil, err
	}
	p, err := jsonpatch.DecodePatch(encoded)
	if err != nil {
		return nil, fmt.Errorf("injector produced an invalid patch: %w", err)
	}
	return p.Apply(raw)
}
