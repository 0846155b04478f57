// Package trusttarget is the TrustTarget API (trustsync.io/v1alpha1, cluster-scoped):
// sources (the same JSON items as the trustsync.io/sources annotation: bundles by name
// or by signer and labels, the public roots; PEM, PKCS#12 or JKS) and a ConfigMap or
// Secret to write them into, in every namespace a selector picks; what a valid spec
// is; and the marks a target leaves on the objects it writes. It links no controller:
// kubectl trustsync prints TrustTargets with it, and controller/targets keeps them.
package trusttarget

import (
	"fmt"
	"regexp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trustsync/trustsync/delivery/contract"
)

// Resource is the TrustTargets' resource.
var Resource = schema.GroupVersionResource{Group: "trustsync.io", Version: "v1alpha1", Resource: "trusttargets"}

// Kind is their kind.
const Kind = "TrustTarget"

// TrustTarget writes sources into a ConfigMap or Secret in every selected namespace.
type TrustTarget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitempty"`
}

// Spec is what to write, and where.
type Spec struct {
	// Sources are the trustsync.io/sources items; each path is a key of the object.
	Sources []contract.Source `json:"sources"`
	Target  Target            `json:"target"`
}

// Target is the object written in each namespace.
type Target struct {
	ConfigMap *ObjectRef `json:"configMap,omitempty"`
	Secret    *ObjectRef `json:"secret,omitempty"`
	// NamespaceSelector picks the namespaces; absent, every namespace.
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// The kinds of object a target writes.
const (
	KindConfigMap = "ConfigMap"
	KindSecret    = "Secret"
)

// Object is the kind (KindConfigMap or KindSecret) and name of the object the target
// writes in each namespace; a valid spec names exactly one.
func (t Target) Object() (kind, name string) {
	if t.Secret != nil {
		return KindSecret, t.Secret.Name
	}
	if t.ConfigMap != nil {
		return KindConfigMap, t.ConfigMap.Name
	}
	return KindConfigMap, ""
}

// ObjectRef names the object written in each namespace.
type ObjectRef struct {
	Name string `json:"name"`
}

// Status is how the target stands.
type Status struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	// Namespaces the selector matches now, and how many hold the current content.
	Namespaces int `json:"namespaces"`
	Synced     int `json:"synced"`
	// Anchors are the anchors (bundle.AnchorID) the current content holds, sorted:
	// the Synced namespaces hold them. A rotation waits until its new CA is among
	// them and every selected namespace is synced.
	Anchors []string `json:"anchors,omitempty"`
	// Failures name up to ten namespaces whose object could not be written, and why.
	Failures []Failure `json:"failures,omitempty"`
}

// Failure is one namespace that could not be written.
type Failure struct {
	Namespace string `json:"namespace"`
	Message   string `json:"message"`
}

// TargetLabel, on a written ConfigMap or Secret, names the TrustTarget that writes it:
// one target per object, so two targets naming the same object conflict on it, and
// the controller finds what it wrote without watching every object of the cluster.
const TargetLabel = "trustsync.io/target"

// CreatedAnnotation marks a ConfigMap or Secret that a TrustTarget created: only such
// an object is deleted when no target claims it any more and nothing else is left in
// it. An object a user made (even empty) is never deleted; only trustsync's keys,
// label and this annotation are taken out of it.
const CreatedAnnotation = "trustsync.io/created"

// CABundleKind is a kind of object whose caBundle fields trustsync fills when it is
// annotated trustsync.io/inject: the controller that fills them and the plugin that
// lists what they hold read this one list.
type CABundleKind struct {
	Resource schema.GroupVersionResource
	Kind     string
}

// CABundleKinds are the cluster-scoped kinds with caBundle fields.
var CABundleKinds = []CABundleKind{
	{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}, "ValidatingWebhookConfiguration"},
	{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}, "MutatingWebhookConfiguration"},
	{schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}, "APIService"},
	{schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}, "CustomResourceDefinition"},
}

// Ready is the condition that says whether every selected namespace holds the
// current content.
const Ready = "Ready"

// KeyPattern is what a ConfigMap or Secret key may be.
var KeyPattern = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

// Validate checks what the API server's schema cannot: the sources as the annotation
// takes them, kinds of source that have a namespace of their own refused, each path a
// key, one object named.
func (s Spec) Validate() field.ErrorList {
	var errs field.ErrorList
	srcPath := field.NewPath("spec", "sources")
	if len(s.Sources) == 0 {
		errs = append(errs, field.Required(srcPath, "name the bundles to write"))
	}
	errs = append(errs, contract.ValidateSources(s.Sources, srcPath)...)
	for i, src := range s.Sources {
		p := srcPath.Index(i)
		switch {
		case src.ConfigMap != nil || src.Secret != nil:
			errs = append(errs, field.Forbidden(p, "a TrustTarget writes bundles and the public roots into many namespaces; a ConfigMap or Secret source belongs to one namespace: publish its anchors as a bundle instead"))
		case src.PasswordSecret != nil:
			errs = append(errs, field.Forbidden(p.Child("passwordSecret"), "a TrustTarget's truststores use the default password \""+contract.DefaultStorePassword+"\" (a truststore's content is public)"))
		}
		if !KeyPattern.MatchString(src.Path) {
			errs = append(errs, field.Invalid(p.Child("path"), src.Path, "must be a ConfigMap or Secret key: letters, digits, '-', '_' and '.' only"))
		}
	}
	t := field.NewPath("spec", "target")
	switch {
	case (s.Target.ConfigMap == nil) == (s.Target.Secret == nil):
		errs = append(errs, field.Required(t, "give exactly one of configMap and secret"))
	case s.Target.ConfigMap != nil && s.Target.ConfigMap.Name == "":
		errs = append(errs, field.Required(t.Child("configMap", "name"), ""))
	case s.Target.Secret != nil && s.Target.Secret.Name == "":
		errs = append(errs, field.Required(t.Child("secret", "name"), ""))
	}
	if s.Target.NamespaceSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(s.Target.NamespaceSelector); err != nil {
			errs = append(errs, field.Invalid(t.Child("namespaceSelector"), s.Target.NamespaceSelector, err.Error()))
		}
	}
	return errs
}

// FromUnstructured decodes a TrustTarget read through a dynamic client.
func FromUnstructured(u *unstructured.Unstructured) (*TrustTarget, error) {
	t := &TrustTarget{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, t); err != nil {
		return nil, fmt.Errorf("TrustTarget %s: %w", u.GetName(), err)
	}
	return t, nil
}
