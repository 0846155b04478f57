package targets

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/render"
)

// object is a written ConfigMap or Secret as the controller compares it: its keys
// (a ConfigMap's text and binary data; a Secret's data, all binary) and metadata.
type object struct {
	meta   metav1.Object
	secret bool
	data   map[string]string
	binary map[string][]byte
}

func objectOf(obj any) (object, bool) {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return object{meta: o, data: o.Data, binary: o.BinaryData}, true
	case *corev1.Secret:
		return object{meta: o, secret: true, binary: o.Data}, true
	}
	return object{}, false
}

func (o object) kind() string {
	if o.secret {
		return "Secret"
	}
	return "ConfigMap"
}

// getObject reads a ConfigMap (or a Secret) whole: one the controller's informer does
// not hold, which a user or an annotation may have made.
func getObject(ctx context.Context, client kubernetes.Interface, secret bool, namespace, name string) (*object, error) {
	var obj any
	var err error
	if secret {
		obj, err = client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	} else {
		obj, err = client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, err
	}
	o, _ := objectOf(obj)
	return &o, nil
}

// value is key's value in the object, and whether it has it.
func (o object) value(key string) ([]byte, bool) {
	if v, ok := o.data[key]; ok {
		return []byte(v), true
	}
	v, ok := o.binary[key]
	return v, ok
}

// files is the object's keys among paths, as a previous run's files: the base a
// restarted controller renders from, so that a source failing after a restart keeps
// the content the object holds rather than losing its key.
func (o object) files(paths []string) map[string]render.File {
	out := map[string]render.File{}
	for _, p := range paths {
		if v, ok := o.value(p); ok {
			out[p] = render.File{Data: v, Mode: render.TrustFileMode}
		}
	}
	return out
}

// owned is what manager applied to an object, read from its managedFields: the keys
// of its data (and binaryData), its labels and its annotations.
type owned struct {
	keys, labels, annotations map[string]bool
}

func ownedBy(m metav1.Object, manager string) owned {
	o := owned{keys: map[string]bool{}, labels: map[string]bool{}, annotations: map[string]bool{}}
	for _, e := range m.GetManagedFields() {
		if e.Manager != manager || e.Operation != metav1.ManagedFieldsOperationApply || e.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Data       map[string]json.RawMessage `json:"f:data"`
			BinaryData map[string]json.RawMessage `json:"f:binaryData"`
			Metadata   struct {
				Labels      map[string]json.RawMessage `json:"f:labels"`
				Annotations map[string]json.RawMessage `json:"f:annotations"`
			} `json:"f:metadata"`
		}
		// A malformed entry owns nothing: the comparison then finds the object out
		// of date and applies.
		_ = json.Unmarshal(e.FieldsV1.GetRawBytes(), &fields)
		for _, set := range []struct {
			from map[string]json.RawMessage
			to   map[string]bool
		}{{fields.Data, o.keys}, {fields.BinaryData, o.keys}, {fields.Metadata.Labels, o.labels}, {fields.Metadata.Annotations, o.annotations}} {
			for k := range set.from {
				set.to[strings.TrimPrefix(k, "f:")] = true
			}
		}
	}
	return o
}

// desired is what one apply writes into one object.
type desired struct {
	data        map[string]string
	binary      map[string][]byte
	labels      map[string]string
	annotations map[string]string
}

// holds reports whether the object already holds exactly what d applies as manager:
// the same keys with the same values, the same labels and annotations, and no other
// field of manager's (which the apply would remove). Such an apply would change
// nothing, so it is not sent.
func (o object) holds(d desired, manager string) bool {
	own := ownedBy(o.meta, manager)
	want := map[string][]byte{}
	for k, v := range d.data {
		want[k] = []byte(v)
	}
	maps.Copy(want, d.binary)
	if len(own.keys) != len(want) || len(own.labels) != len(d.labels) || len(own.annotations) != len(d.annotations) {
		return false
	}
	for k, v := range want {
		got, ok := o.value(k)
		if !own.keys[k] || !ok || !bytes.Equal(got, v) {
			return false
		}
		// In a ConfigMap, PEM is text data and a truststore binary data.
		if !o.secret && hasKey(d.data, k) != hasKey(o.data, k) {
			return false
		}
	}
	for k, v := range d.labels {
		if !own.labels[k] || o.meta.GetLabels()[k] != v {
			return false
		}
	}
	for k, v := range d.annotations {
		if !own.annotations[k] || o.meta.GetAnnotations()[k] != v {
			return false
		}
	}
	return true
}

// digest identifies what d writes.
func (d desired) digest() string {
	h := sha256.New()
	h.Write([]byte(digestOf(d.data, d.binary)))
	for _, m := range []map[string]string{d.labels, d.annotations} {
		keys := slices.Sorted(maps.Keys(m))
		for _, k := range keys {
			h.Write([]byte(k + "=" + m[k] + "\x00"))
		}
		h.Write([]byte{1})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

// keepHeld adds to data and binary, for every path whose sources failed with no
// content rendered, the content the live object holds: a payload never lacks a key
// only because its source failed, so server-side apply never removes it.
func keepHeld(sources []v1alpha1.Source, r *render.Rendering, live *object, data map[string]string, binary map[string][]byte) {
	if live == nil {
		return
	}
	for _, src := range sources {
		if _, failed := r.Failed[src.Path]; !failed || hasKey(r.Files, src.Path) {
			continue
		}
		v, ok := live.value(src.Path)
		if !ok {
			continue
		}
		if src.FileFormat() == v1alpha1.FormatPEM {
			data[src.Path] = string(v)
		} else {
			binary[src.Path] = v
		}
	}
}
