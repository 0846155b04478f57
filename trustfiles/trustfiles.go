// Package trustfiles says which trust a stored pod reads and how: the files trustsync
// delivers or the kubelet projects from bundles (injector.TrustFiles), the keys of
// the ConfigMaps and Secrets trustsync writes that the pod mounts as volumes (read
// back as files the node's agent can observe), and the same keys read through env or
// envFrom, which nobody can observe and a rotation must wait for by time. It reads no
// API: the caller says which objects trustsync writes (Objects).
package trustfiles

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// Object is a ConfigMap or Secret trustsync writes: what each of its keys is made of.
type Object struct {
	Kind      string
	Namespace string
	Name      string
	// Writer names who writes it: "TrustTarget NAME", or "annotation".
	Writer string
	Keys   []Key
}

// Key is one key of a trust object.
type Key struct {
	Key     string
	Format  string
	Sources []v1alpha1.Source
}

// Objects are the trust objects of a cluster, by kind, namespace and name.
type Objects map[ObjectRef]*Object

// ObjectRef names a trust object.
type ObjectRef struct{ Kind, Namespace, Name string }

func (o *Object) ref() ObjectRef { return ObjectRef{o.Kind, o.Namespace, o.Name} }

// Add records o; a later writer of the same object does not replace the first (a
// TrustTarget conflicting with another writes nothing into it).
func (objs Objects) Add(o *Object) {
	if _, ok := objs[o.ref()]; !ok {
		objs[o.ref()] = o
	}
}

// FromTargets lists the objects the TrustTargets write in namespaces (their labels
// decide which a target selects; terminating namespaces are written no more). A target
// whose spec is invalid writes nothing and is skipped.
func FromTargets(targets []*v1alpha1.TrustTarget, namespaces []*metav1.PartialObjectMetadata) Objects {
	objs := Objects{}
	for _, t := range targets {
		spec, err := v1alpha1.ParseTrustTargetSpec(&t.Spec)
		if err != nil {
			continue
		}
		keys := keysOf(spec.Sources)
		for _, ns := range namespaces {
			if ns.DeletionTimestamp != nil || !spec.Namespaces.Matches(labels.Set(ns.Labels)) {
				continue
			}
			objs.Add(&Object{Kind: spec.Kind, Namespace: ns.Name, Name: spec.Name, Writer: v1alpha1.TrustTargetKind + " " + t.Name, Keys: keys})
		}
	}
	return objs
}

// AddInjected records the ConfigMaps and Secrets annotation injection fills, as its
// index lists them (caBundle fields are read by API servers, not pods, and are left
// out). An object a TrustTarget writes is recorded as the target's.
func (objs Objects) AddInjected(idx *v1alpha1.InjectedIndex) {
	if idx == nil {
		return
	}
	for _, o := range idx.Objects {
		if o.Kind == v1alpha1.KindConfigMap || o.Kind == v1alpha1.KindSecret {
			objs.Add(&Object{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Writer: v1alpha1.WriterAnnotation, Keys: keysOf(o.Sources)})
		}
	}
}

// keysOf groups sources by the key they write, in the order of first mention.
func keysOf(sources []v1alpha1.Source) []Key {
	var keys []Key
	for _, s := range sources {
		i := slices.IndexFunc(keys, func(k Key) bool { return k.Key == s.Path })
		if i < 0 {
			i = len(keys)
			keys = append(keys, Key{Key: s.Path, Format: s.FileFormat()})
		}
		keys[i].Sources = append(keys[i].Sources, s)
	}
	return keys
}

// Of lists every trust file of a stored pod: trustsync's deliveries and projected
// bundles, then the keys of objs the pod mounts as volumes.
func Of(pod *corev1.Pod, objs Objects) []TrustFile {
	return append(Delivered(pod), ObjectFiles(pod, objs)...)
}

// ObjectFiles lists the keys of trust objects the pod mounts: a configMap or secret
// volume, or a projected volume's configMap or secret source, each key under the
// path the volume's items give it (a key the items leave out is not there).
func ObjectFiles(pod *corev1.Pod, objs Objects) []TrustFile {
	if len(objs) == 0 {
		return nil
	}
	var files []TrustFile
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			files = append(files, filesOf(pod, v.Name, v1alpha1.DeliveryConfigMap, objs[ObjectRef{v1alpha1.KindConfigMap, pod.Namespace, v.ConfigMap.Name}], v.ConfigMap.Items)...)
		case v.Secret != nil:
			files = append(files, filesOf(pod, v.Name, v1alpha1.DeliverySecret, objs[ObjectRef{v1alpha1.KindSecret, pod.Namespace, v.Secret.SecretName}], v.Secret.Items)...)
		case v.Projected != nil:
			for _, p := range v.Projected.Sources {
				switch {
				case p.ConfigMap != nil:
					files = append(files, filesOf(pod, v.Name, v1alpha1.DeliveryConfigMap, objs[ObjectRef{v1alpha1.KindConfigMap, pod.Namespace, p.ConfigMap.Name}], p.ConfigMap.Items)...)
				case p.Secret != nil:
					files = append(files, filesOf(pod, v.Name, v1alpha1.DeliverySecret, objs[ObjectRef{v1alpha1.KindSecret, pod.Namespace, p.Secret.Name}], p.Secret.Items)...)
				}
			}
		}
	}
	return files
}

func filesOf(pod *corev1.Pod, volume string, delivery v1alpha1.Delivery, o *Object, items []corev1.KeyToPath) []TrustFile {
	if o == nil {
		return nil
	}
	var files []TrustFile
	for _, k := range o.Keys {
		file := k.Key
		if len(items) > 0 {
			i := slices.IndexFunc(items, func(it corev1.KeyToPath) bool { return it.Key == k.Key })
			if i < 0 {
				continue
			}
			file = items[i].Path
		}
		files = append(files, TrustFile{Delivery: delivery, Volume: volume, File: file, Format: k.Format, Sources: k.Sources})
	}
	return withMounts(pod, files, "")
}

// EnvReader is a container reading a trust object's key through its environment:
// the kubelet resolves it once, when the container starts, and nobody can see what
// it holds since.
type EnvReader struct {
	Container string `json:"container"`
	Kind      string `json:"kind"`
	Object    string `json:"object"`
	// Keys read: one for env, every key for envFrom.
	Keys []string `json:"keys"`
	// How: "env" or "envFrom".
	How     string            `json:"how"`
	Sources []v1alpha1.Source `json:"-"`
}

// EnvReaders lists the pod's containers (init and ephemeral ones included) that read
// a key of a trust object through env or envFrom.
func EnvReaders(pod *corev1.Pod, objs Objects) []EnvReader {
	if len(objs) == 0 {
		return nil
	}
	var out []EnvReader
	add := func(container, how string, o *Object, key string) {
		if o == nil {
			return
		}
		r := EnvReader{Container: container, Kind: o.Kind, Object: o.Name, How: how}
		for _, k := range o.Keys {
			if key == "" || k.Key == key {
				r.Keys = append(r.Keys, k.Key)
				r.Sources = append(r.Sources, k.Sources...)
			}
		}
		if len(r.Keys) > 0 {
			out = append(out, r)
		}
	}
	ref := func(kind, name string) *Object { return objs[ObjectRef{kind, pod.Namespace, name}] }
	visit := func(name string, env []corev1.EnvVar, envFrom []corev1.EnvFromSource) {
		for _, e := range env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				add(name, "env", ref(v1alpha1.KindConfigMap, r.Name), r.Key)
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				add(name, "env", ref(v1alpha1.KindSecret, r.Name), r.Key)
			}
		}
		for _, e := range envFrom {
			if e.ConfigMapRef != nil {
				add(name, "envFrom", ref(v1alpha1.KindConfigMap, e.ConfigMapRef.Name), "")
			}
			if e.SecretRef != nil {
				add(name, "envFrom", ref(v1alpha1.KindSecret, e.SecretRef.Name), "")
			}
		}
	}
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		visit(c.Name, c.Env, c.EnvFrom)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		visit(c.Name, c.Env, c.EnvFrom)
	}
	return out
}

// Describe names the reading in a rotation's reasons: "container app reads ConfigMap
// trust-ca (ca.pem) through env".
func (r EnvReader) Describe() string {
	return "container " + r.Container + " reads " + r.Kind + " " + r.Object + " (" + strings.Join(r.Keys, ", ") + ") through " + r.How
}

// PasswordSecret is the Secret holding the password of a truststore file, nil for
// one with the default password (or a PEM file): the node's agent reads no Secret, so
// such a store cannot be observed.
func PasswordSecret(tf TrustFile) *v1alpha1.KeyRef {
	if tf.Format == v1alpha1.FormatPEM {
		return nil
	}
	for _, s := range tf.Sources {
		if s.PasswordSecret != nil {
			return s.PasswordSecret
		}
	}
	return nil
}
