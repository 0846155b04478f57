package objects

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// Kind is a kind of object trustsync writes trust into: a ConfigMap or Secret (keys
// of its data, for TrustTargets and annotations alike), or one of CABundleKinds (its
// caBundle fields, for annotations).
type Kind struct {
	Resource   schema.GroupVersionResource
	Name       string
	Namespaced bool
	// CABundle: the object gets its caBundle fields; otherwise keys of its data.
	CABundle bool
}

// The kinds written.
var (
	ConfigMap     = Kind{Resource: corev1.SchemeGroupVersion.WithResource("configmaps"), Name: "ConfigMap", Namespaced: true}
	Secret        = Kind{Resource: corev1.SchemeGroupVersion.WithResource("secrets"), Name: "Secret", Namespaced: true}
	CABundleKinds = func() []Kind {
		var out []Kind
		for _, k := range v1alpha1.CABundleKinds {
			out = append(out, Kind{Resource: k.Resource, Name: k.Kind, CABundle: true})
		}
		return out
	}()
)

// String is the kind's name, as messages and metrics name it.
func (k Kind) String() string { return k.Name }

// KindNamed is the kind of a ConfigMap or Secret a TrustTarget names
// (v1alpha1.KindConfigMap, v1alpha1.KindSecret).
func KindNamed(name string) Kind {
	if name == Secret.Name {
		return Secret
	}
	return ConfigMap
}

// MetaOf is the metadata of an informer's object, or of the last state of one deleted.
func MetaOf(obj any) (metav1.Object, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("the informer delivered a %T, which has no object metadata; it is skipped", obj)
	}
	return m, nil
}
