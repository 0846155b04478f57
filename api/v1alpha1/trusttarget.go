package v1alpha1

import (
	"fmt"
	"regexp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TrustTarget's kind and resource.
const TrustTargetKind = "TrustTarget"

var TrustTargetResource = GroupVersion.WithResource("trusttargets")

// TrustTarget writes sources (the same JSON items as the trustsync.io/sources
// annotation: bundles by name or by signer and labels, the public roots; PEM, PKCS#12
// or JKS) into a ConfigMap or Secret in every namespace a selector picks. It is
// cluster-scoped; controller/targets keeps them, kubectl trustsync prints them.
type TrustTarget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              TrustTargetSpec   `json:"spec"`
	Status            TrustTargetStatus `json:"status,omitempty"`
}

// TrustTargetSpec is what to write, and where.
type TrustTargetSpec struct {
	// Sources are the trustsync.io/sources items; each path is a key of the object.
	Sources []Source `json:"sources"`
	Target  Target   `json:"target"`
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

// TrustTargetStatus is how the target stands.
type TrustTargetStatus struct {
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
	Failures []NamespaceFailure `json:"failures,omitempty"`
	// NotGranted is how many namespaces the selector matches that are not granted
	// every source (with tenancy enforced): they are not written, and not counted in
	// Namespaces. NotGrantedNamespaces names up to ten, each with the grant missing.
	NotGranted           int                `json:"notGranted,omitempty"`
	NotGrantedNamespaces []NamespaceFailure `json:"notGrantedNamespaces,omitempty"`
}

// NamespaceFailure is one namespace that could not be written.
type NamespaceFailure struct {
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

// The reasons of a TrustTarget's Ready condition, and of its Events.
const (
	// ReasonSynced: every selected namespace holds the current content.
	ReasonSynced = "Synced"
	// ReasonSourceMissing: a source selects nothing; the last good content is kept.
	ReasonSourceMissing = "SourceMissing"
	// ReasonNoNamespaces: the selector matches no namespace (not a failure).
	ReasonNoNamespaces = "NoNamespaces"
	// ReasonWriteFailed: some namespaces could not be written.
	ReasonWriteFailed = "WriteFailed"
	// ReasonSecretsNotAllowed: the target writes a Secret and the chart did not
	// let the controller write Secrets.
	ReasonSecretsNotAllowed = "SecretsNotAllowed"
	// ReasonSecretNotAuthorized: the target writes a Secret whose name is not one the
	// controller may write (the chart's targets.authorizedSecrets).
	ReasonSecretNotAuthorized = "SecretNotAuthorized"
)

// KeyPattern is what a ConfigMap or Secret key may be.
var KeyPattern = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

// ParsedTrustTargetSpec is a TrustTarget's spec as the controller, the plugin and
// the read model use it.
type ParsedTrustTargetSpec struct {
	Sources []Source
	// Kind (KindConfigMap or KindSecret) and Name of the object written.
	Kind, Name string
	// Namespaces selects the namespaces written (labels.Everything() when the spec
	// names no selector).
	Namespaces labels.Selector
}

// ParseTrustTargetSpec checks what the API server's schema cannot (the sources as the
// annotation takes them, kinds of source that have a namespace of their own refused,
// each path a key, one object named) and returns the spec's typed values; the error
// is a field.ErrorList's aggregate, naming each offending field.
func ParseTrustTargetSpec(s *TrustTargetSpec) (*ParsedTrustTargetSpec, error) {
	parsed := &ParsedTrustTargetSpec{Sources: s.Sources, Namespaces: labels.Everything()}
	parsed.Kind, parsed.Name = s.Target.Object()
	var errs field.ErrorList
	srcPath := field.NewPath("spec", "sources")
	if len(s.Sources) == 0 {
		errs = append(errs, field.Required(srcPath, "name the bundles to write"))
	}
	errs = append(errs, ValidateSources(s.Sources, srcPath)...)
	for i, src := range s.Sources {
		p := srcPath.Index(i)
		switch {
		case src.ConfigMap != nil || src.Secret != nil:
			errs = append(errs, field.Forbidden(p, "a TrustTarget writes bundles and the public roots into many namespaces; a ConfigMap or Secret source belongs to one namespace: publish its anchors as a bundle instead"))
		case src.PasswordSecret != nil:
			errs = append(errs, field.Forbidden(p.Child("passwordSecret"), "a TrustTarget's truststores use the default password \""+DefaultStorePassword+"\" (a truststore's content is public)"))
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
		sel, err := metav1.LabelSelectorAsSelector(s.Target.NamespaceSelector)
		if err != nil {
			errs = append(errs, field.Invalid(t.Child("namespaceSelector"), s.Target.NamespaceSelector, err.Error()))
		}
		parsed.Namespaces = sel
	}
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return parsed, nil
}

// TrustTargetFromUnstructured decodes a TrustTarget read through a dynamic client.
func TrustTargetFromUnstructured(u *unstructured.Unstructured) (*TrustTarget, error) {
	return fromUnstructured[TrustTarget](u, TrustTargetKind+" %s")
}

// fromUnstructured converts an object read through a dynamic client into a T, the one
// way every kind of this API is read; named (a format taking the object's name) says
// what it is in the error.
func fromUnstructured[T any](u *unstructured.Unstructured, named string) (*T, error) {
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return nil, fmt.Errorf(named+": %w", u.GetName(), err)
	}
	return out, nil
}
