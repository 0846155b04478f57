// Package objects is what trustsync's two writers of ConfigMaps and Secrets share:
// the TrustTarget controller (controller/targets) and the injection into annotated
// objects (controller/inject). A Kind names what is written; an Object is one as it
// was written, compared by what an apply would leave of it (Holds), never by a
// write; Desired is what is to be written and Apply sends it by server-side apply
// without force, so a field another manager owns is reported, never taken. Beside
// them: each object's source watches and last rendering (Tended), the Secrets a
// controller may touch, the tenancy split, and the writers' metrics.
package objects

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

// Object is a written ConfigMap or Secret as the controller compares it: its keys
// (a ConfigMap's text and binary data; a Secret's data, all binary) and metadata.
type Object struct {
	Meta   metav1.Object
	Secret bool
	Data   map[string]string
	Binary map[string][]byte
}

// ObjectOf is a ConfigMap or Secret as written; false for anything else.
func ObjectOf(obj any) (Object, bool) {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return Object{Meta: o, Data: o.Data, Binary: o.BinaryData}, true
	case *corev1.Secret:
		return Object{Meta: o, Secret: true, Binary: o.Data}, true
	}
	return Object{}, false
}

// Kind is the object's kind.
func (o Object) Kind() Kind {
	if o.Secret {
		return Secret
	}
	return ConfigMap
}

// GetObject reads a ConfigMap (or a Secret) whole: one the controller's informer does
// not hold, which a user or an annotation may have made.
func GetObject(ctx context.Context, client kubernetes.Interface, kind Kind, namespace, name string) (*Object, error) {
	var obj any
	var err error
	if kind == Secret {
		obj, err = client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	} else {
		obj, err = client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, err
	}
	o, _ := ObjectOf(obj)
	return &o, nil
}

// Value is key's value in the object, and whether it has it.
func (o Object) Value(key string) ([]byte, bool) {
	if v, ok := o.Data[key]; ok {
		return []byte(v), true
	}
	v, ok := o.Binary[key]
	return v, ok
}

// Files is the object's keys among paths, as a previous run's files: the base a
// restarted controller renders from, so that a source failing after a restart keeps
// the content the object holds rather than losing its key.
func (o Object) Files(paths []string) map[string]render.File {
	out := map[string]render.File{}
	for _, p := range paths {
		if v, ok := o.Value(p); ok {
			out[p] = render.File{Data: v, Mode: render.TrustFileMode}
		}
	}
	return out
}

// Owned is what manager applied to an object, read from its managedFields: the keys
// of its data (and binaryData), its labels and its annotations.
type Owned struct {
	Keys, Labels, Annotations map[string]bool
}

// OwnedBy is what manager owns of m, from its managedFields.
func OwnedBy(m metav1.Object, manager string) Owned {
	o := Owned{Keys: map[string]bool{}, Labels: map[string]bool{}, Annotations: map[string]bool{}}
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
		}{{fields.Data, o.Keys}, {fields.BinaryData, o.Keys}, {fields.Metadata.Labels, o.Labels}, {fields.Metadata.Annotations, o.Annotations}} {
			for k := range set.from {
				set.to[strings.TrimPrefix(k, "f:")] = true
			}
		}
	}
	return o
}

// Desired is what one apply writes into one object.
type Desired struct {
	Data        map[string]string
	Binary      map[string][]byte
	Labels      map[string]string
	Annotations map[string]string
}

// Holds reports whether the object already holds exactly what d applies as manager:
// the same keys with the same values, the same labels and annotations, and no other
// field of manager's (which the apply would remove). Such an apply would change
// nothing, so it is not sent.
func (o Object) Holds(d Desired, manager string) bool {
	own := OwnedBy(o.Meta, manager)
	want := map[string][]byte{}
	for k, v := range d.Data {
		want[k] = []byte(v)
	}
	maps.Copy(want, d.Binary)
	if len(own.Keys) != len(want) || len(own.Labels) != len(d.Labels) || len(own.Annotations) != len(d.Annotations) {
		return false
	}
	for k, v := range want {
		got, ok := o.Value(k)
		if !own.Keys[k] || !ok || !bytes.Equal(got, v) {
			return false
		}
		// In a ConfigMap, PEM is text data and a truststore binary data.
		if !o.Secret && hasKey(d.Data, k) != hasKey(o.Data, k) {
			return false
		}
	}
	for k, v := range d.Labels {
		if !own.Labels[k] || o.Meta.GetLabels()[k] != v {
			return false
		}
	}
	for k, v := range d.Annotations {
		if !own.Annotations[k] || o.Meta.GetAnnotations()[k] != v {
			return false
		}
	}
	return true
}

// Digest identifies what d writes.
func (d Desired) Digest() string {
	h := sha256.New()
	h.Write([]byte(DigestOf(d.Data, d.Binary)))
	for _, m := range []map[string]string{d.Labels, d.Annotations} {
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

// KeepHeld adds to data and binary, for every path whose sources failed with no
// content rendered, the content the live object holds: a payload never lacks a key
// only because its source failed, so server-side apply never removes it.
func KeepHeld(sources []v1alpha1.Source, r *render.Rendering, live *Object, data map[string]string, binary map[string][]byte) {
	if live == nil {
		return
	}
	for _, src := range sources {
		if _, failed := r.Failed[src.Path]; !failed || hasKey(r.Files, src.Path) {
			continue
		}
		v, ok := live.Value(src.Path)
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

// DigestOf identifies what keys hold: equal digests, equal keys and values.
func DigestOf(data map[string]string, binary map[string][]byte) string {
	h := sha256.New()
	for _, k := range KeysOf(data, binary) {
		h.Write([]byte(k + "\x00" + data[k] + string(binary[k]) + "\x00"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// KeysOf is the keys of data and binary, sorted.
func KeysOf(data map[string]string, binary map[string][]byte) []string {
	var keys []string
	for k := range data {
		keys = append(keys, k)
	}
	for k := range binary {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
