package injector

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// ObjectSources reads what an annotated object other than a pod asks for (a ConfigMap
// or Secret to fill, a webhook configuration's caBundle): the same source annotations
// as a pod's (trustsync.io/sources, or bundle-name, or signer-name with
// label-selector; path, format, optional), meaning the same. ok is false when the
// object does not ask (no trustsync.io/inject: "true").
func ObjectSources(annotations map[string]string) (sources []v1alpha1.Source, ok bool, errs field.ErrorList) {
	p := &annotationParser{a: annotations}
	switch v, set := annotations[v1alpha1.AnnotationInject]; {
	case !set || v == "false":
		return nil, false, nil
	case v != "true":
		return nil, true, field.ErrorList{field.NotSupported(annotationPath(v1alpha1.AnnotationInject), v, []string{"true", "false"})}
	}
	sources = p.sources(false)
	return sources, true, p.errs
}
