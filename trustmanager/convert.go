// Package trustmanager reads trust-manager's Bundle and ClusterBundle and says what
// TrustTargets (and bundles) do the same: what kubectl trustsync convert prints.
package trustmanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trustsync/trustsync/api/v1alpha1"
	tsbundle "github.com/trustsync/trustsync/bundle"
)

// TrustManagerBundle is one object read from a conversion's input: trust-manager's
// Bundle (trust.cert-manager.io/v1alpha1) or ClusterBundle (trust-manager.io/v1alpha2),
// whose specs differ; Spec is decoded according to Kind by FromTrustManager.
type TrustManagerBundle struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              json.RawMessage `json:"spec,omitempty"`
}

// IsTrustManager reports whether apiVersion and kind name a Bundle or a ClusterBundle.
func IsTrustManager(apiVersion, kind string) bool {
	group, _, _ := strings.Cut(apiVersion, "/")
	return (group == "trust.cert-manager.io" && kind == "Bundle") || (group == "trust-manager.io" && kind == "ClusterBundle")
}

// bundleSpec is trust-manager's Bundle (trust.cert-manager.io/v1alpha1).
type bundleSpec struct {
	Sources []struct {
		ConfigMap     *tmSourceObject `json:"configMap,omitempty"`
		Secret        *tmSourceObject `json:"secret,omitempty"`
		InLine        *string         `json:"inLine,omitempty"`
		UseDefaultCAs *bool           `json:"useDefaultCAs,omitempty"`
	} `json:"sources"`
	Target struct {
		ConfigMap         *tmTargetObject       `json:"configMap,omitempty"`
		Secret            *tmTargetObject       `json:"secret,omitempty"`
		AdditionalFormats *tmFormats            `json:"additionalFormats,omitempty"`
		NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	} `json:"target"`
}

type tmSourceObject struct {
	Name           string                `json:"name,omitempty"`
	Key            string                `json:"key,omitempty"`
	IncludeAllKeys bool                  `json:"includeAllKeys,omitempty"`
	Selector       *metav1.LabelSelector `json:"selector,omitempty"`
}

type tmTargetObject struct {
	Key      string      `json:"key,omitempty"`
	Metadata *tmMetadata `json:"metadata,omitempty"`
}

type tmFormats struct {
	JKS    *tmStore `json:"jks,omitempty"`
	PKCS12 *tmStore `json:"pkcs12,omitempty"`
}

type tmStore struct {
	Key      string  `json:"key"`
	Password *string `json:"password,omitempty"`
	Profile  string  `json:"profile,omitempty"`
}

// tmMetadata is what trust-manager adds to the objects it writes.
type tmMetadata struct {
	Annotations map[string]string `json:"annotations,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
}

// clusterBundleSpec is trust-manager's ClusterBundle (trust-manager.io/v1alpha2), as
// its CRD (deploy/crds/trust-manager.io_clusterbundles.yaml) defines it.
type clusterBundleSpec struct {
	DefaultCAs *struct {
		Provider string `json:"provider"`
	} `json:"defaultCAs,omitempty"`
	InLineCAs  *string `json:"inLineCAs,omitempty"`
	SourceRefs []struct {
		Kind     string                `json:"kind"`
		Name     string                `json:"name,omitempty"`
		Selector *metav1.LabelSelector `json:"selector,omitempty"`
		Key      string                `json:"key"`
	} `json:"sourceRefs,omitempty"`
	Target struct {
		ConfigMap         *clusterBundleTarget  `json:"configMap,omitempty"`
		Secret            *clusterBundleTarget  `json:"secret,omitempty"`
		NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	} `json:"target"`
}

type clusterBundleTarget struct {
	Data []struct {
		Key      string  `json:"key"`
		Format   string  `json:"format,omitempty"`
		Password *string `json:"password,omitempty"`
		Profile  string  `json:"profile,omitempty"`
	} `json:"data"`
	Metadata *tmMetadata `json:"metadata,omitempty"`
}

// Conversion is what one trust-manager object becomes: the TrustTargets (one per
// kind of object it writes), the bundles holding its inline anchors, what could not
// be carried over, and the objects the controller would refuse (printed for review,
// never as ready to apply).
type Conversion struct {
	Targets []*v1alpha1.TrustTarget
	Bundles []*certificatesv1.ClusterTrustBundle
	Notes   []string
	// Refused are converted objects the controller or the API server would refuse,
	// each with why.
	Refused []Refusal
}

// Refusal is an object that cannot be applied as converted.
type Refusal struct {
	Object any
	Why    string
}

// key is one key of a target object: its name and format.
// key is one key a target writes: its path, format and, for pkcs12, profile.
type key struct{ path, format, profile string }

// targetPlan is one object a trust-manager object writes in each namespace.
type targetPlan struct {
	secret bool
	keys   []key
}

// converter gathers what one trust-manager object becomes.
type converter struct {
	b       *TrustManagerBundle
	c       Conversion
	anchors []v1alpha1.Source // each source once; copied onto every key
	inline  int
	// dropped names the sources that are not carried over: a target without them
	// would write fewer anchors than trust-manager did, so it is never ready to apply.
	dropped []string
}

// note records what is not carried over. Everything taken from the input is quoted
// (%q), so a note is one line whatever the input holds.
func (cv *converter) note(format string, args ...any) {
	cv.c.Notes = append(cv.c.Notes, fmt.Sprintf("%s %q: ", cv.b.Kind, cv.b.Name)+fmt.Sprintf(format, args...))
}

// FromTrustManager converts a trust-manager Bundle or ClusterBundle: the same sources
// written as the same keys of the same objects (named after it) in the same
// namespaces. A spec that is not what trust-manager's own schema takes is an error
// in its terms.
func FromTrustManager(b *TrustManagerBundle) (Conversion, error) {
	cv := &converter{b: b}
	var plans []targetPlan
	var selector *metav1.LabelSelector
	switch b.Kind {
	case "Bundle":
		var spec bundleSpec
		if err := decodeSpec(b, &spec); err != nil {
			return Conversion{}, err
		}
		plans, selector = cv.bundle(&spec), spec.Target.NamespaceSelector
	case "ClusterBundle":
		var spec clusterBundleSpec
		if err := decodeSpec(b, &spec); err != nil {
			return Conversion{}, err
		}
		plans, selector = cv.clusterBundle(&spec), spec.Target.NamespaceSelector
	default:
		return Conversion{}, fmt.Errorf("%s %q is not a trust-manager Bundle or ClusterBundle", b.Kind, b.Name)
	}
	if len(cv.anchors) == 0 {
		cv.note("none of its sources is carried over; the TrustTarget has no source until you add one")
	}
	for _, p := range plans {
		cv.target(p, selector, len(plans) > 1)
	}
	for _, bundle := range cv.c.Bundles {
		if errs := validation.IsDNS1123Subdomain(bundle.Name); len(errs) > 0 {
			cv.refuse(bundle, fmt.Sprintf("ClusterTrustBundle name %q: %s", bundle.Name, strings.Join(errs, "; ")))
		}
	}
	for _, b := range cv.c.Bundles {
		if !cv.refused(b) {
			continue
		}
		// A target reading a bundle that cannot exist would write without it.
		for _, t := range cv.c.Targets {
			if !cv.refused(t) {
				cv.refuse(t, fmt.Sprintf("its source %s is refused (above): apply it once that bundle can be", b.Name))
			}
		}
	}
	cv.c.Bundles = slices.DeleteFunc(cv.c.Bundles, func(b *certificatesv1.ClusterTrustBundle) bool { return cv.refused(b) })
	return cv.c, nil
}

// decodeSpec decodes the spec into v, strictly typed: a value of the wrong type is
// reported by its field path and what trust-manager expects there.
func decodeSpec(b *TrustManagerBundle, v any) error {
	if len(b.Spec) == 0 {
		return fmt.Errorf("%s %q has no spec", b.Kind, b.Name)
	}
	err := json.Unmarshal(b.Spec, v)
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Errorf("%s %q: spec.%s is %s, where trust-manager's %s takes %s", b.Kind, b.Name, typeErr.Field, article(typeErr.Value), b.Kind, expected(typeErr.Type))
	}
	if err != nil {
		return fmt.Errorf("%s %q: spec: %w", b.Kind, b.Name, err)
	}
	return nil
}

func article(jsonKind string) string {
	switch jsonKind {
	case "object", "array":
		return "an " + jsonKind
	}
	return "a " + jsonKind
}

// expected says what a Go type is in YAML's words.
func expected(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice:
		return "a list"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Float64:
		return "a number"
	}
	return "a string"
}

// bundle converts a Bundle's sources and says which objects it writes.
func (cv *converter) bundle(spec *bundleSpec) []targetPlan {
	for i, s := range spec.Sources {
		switch {
		case s.UseDefaultCAs != nil && *s.UseDefaultCAs:
			cv.anchors = append(cv.anchors, v1alpha1.Source{DefaultCAs: true})
		case s.UseDefaultCAs != nil:
		case s.InLine != nil:
			cv.inLine(*s.InLine)
		case s.ConfigMap != nil || s.Secret != nil:
			kind, obj := "configMap", s.ConfigMap
			if s.Secret != nil {
				kind, obj = "secret", s.Secret
			}
			what := fmt.Sprintf("%s %q key %q", kind, obj.Name, obj.Key)
			if obj.Selector != nil || obj.IncludeAllKeys {
				what = fmt.Sprintf("%s objects selected by labels (or all their keys)", kind)
			}
			cv.namespaced(fmt.Sprintf("source %d", i), fmt.Sprintf("source %d, a %s", i, what))
		default:
			cv.note("source %d names no kind of source trustsync knows; left out", i)
			cv.dropped = append(cv.dropped, fmt.Sprintf("source %d", i))
		}
	}
	t := spec.Target
	var keys []key
	if f := t.AdditionalFormats; f != nil {
		// trust-manager's defaults: "changeit" for JKS, none for PKCS#12.
		if f.JKS != nil {
			keys = append(keys, cv.store(f.JKS.Key, v1alpha1.FormatJKS, f.JKS.Password, v1alpha1.DefaultStorePassword))
		}
		if f.PKCS12 != nil {
			k := cv.store(f.PKCS12.Key, v1alpha1.FormatPKCS12, f.PKCS12.Password, "")
			k.profile = cv.profile("additionalFormats.pkcs12", f.PKCS12.Key, f.PKCS12.Profile)
			keys = append(keys, k)
		}
	}
	var plans []targetPlan
	for _, obj := range []struct {
		ref    *tmTargetObject
		secret bool
	}{{t.ConfigMap, false}, {t.Secret, true}} {
		if obj.ref == nil {
			continue
		}
		p := targetPlan{secret: obj.secret}
		which := "configMap"
		if obj.secret {
			which = "secret"
		}
		cv.noteMetadata(which, obj.ref.Metadata)
		if obj.ref.Key != "" {
			p.keys = append(p.keys, key{path: obj.ref.Key, format: v1alpha1.FormatPEM})
		}
		// trust-manager writes the additional formats into every target object.
		p.keys = append(p.keys, keys...)
		plans = append(plans, p)
	}
	if len(plans) == 0 {
		cv.note("it names no target object; the TrustTarget writes a ConfigMap named %q", cv.b.Name)
		plans = append(plans, targetPlan{keys: keys})
	}
	return plans
}

// clusterBundle converts a ClusterBundle's sources and says which objects it writes.
func (cv *converter) clusterBundle(spec *clusterBundleSpec) []targetPlan {
	if d := spec.DefaultCAs; d != nil {
		switch d.Provider {
		case "System":
			cv.anchors = append(cv.anchors, v1alpha1.Source{DefaultCAs: true})
		case "Disabled":
		default:
			cv.note("defaultCAs.provider %q is neither System nor Disabled; left out", d.Provider)
			cv.dropped = append(cv.dropped, "defaultCAs")
		}
	}
	if spec.InLineCAs != nil {
		cv.inLine(*spec.InLineCAs)
	}
	for i, ref := range spec.SourceRefs {
		what := fmt.Sprintf("%s %q key %q", ref.Kind, ref.Name, ref.Key)
		if ref.Selector != nil {
			what = fmt.Sprintf("%s objects selected by labels, key %q", ref.Kind, ref.Key)
		}
		cv.namespaced(fmt.Sprintf("sourceRefs[%d]", i), fmt.Sprintf("sourceRefs[%d], a %s", i, what))
	}
	var plans []targetPlan
	for _, obj := range []struct {
		t      *clusterBundleTarget
		secret bool
		field  string
	}{{spec.Target.ConfigMap, false, "configMap"}, {spec.Target.Secret, true, "secret"}} {
		if obj.t == nil {
			continue
		}
		p := targetPlan{secret: obj.secret}
		for _, d := range obj.t.Data {
			switch d.Format {
			case "", "PEM":
				p.keys = append(p.keys, key{path: d.Key, format: v1alpha1.FormatPEM})
			case "PKCS12":
				// trust-manager's ClusterBundle default: a password-less PKCS#12.
				k := cv.store(d.Key, v1alpha1.FormatPKCS12, d.Password, "")
				k.profile = cv.profile("target."+obj.field, d.Key, d.Profile)
				p.keys = append(p.keys, k)
			default:
				cv.note("target.%s key %q has format %q, which trustsync does not write; left out", obj.field, d.Key, d.Format)
			}
		}
		cv.noteMetadata(obj.field, obj.t.Metadata)
		plans = append(plans, p)
	}
	if len(plans) == 0 {
		cv.note("it names no target object; the TrustTarget writes a ConfigMap named %q", cv.b.Name)
		plans = append(plans, targetPlan{})
	}
	return plans
}

// noteMetadata names labels and annotations for the written objects, which do not
// carry over (readers selecting by them must be told).
func (cv *converter) noteMetadata(field string, m *tmMetadata) {
	if m == nil || len(m.Labels)+len(m.Annotations) == 0 {
		return
	}
	cv.note("target.%s.metadata (labels and annotations for the written objects) is not carried over: a TrustTarget labels its objects trustsync.io/target alone, so readers selecting by labels %q or annotations %q find nothing until another tool adds them", field, sortedKeys(m.Labels), sortedKeys(m.Annotations))
}

// profile carries a PKCS#12 profile trustsync writes (Modern2023), and names one it
// does not (trust-manager's LegacyRC2 and LegacyDES), which is written as Modern2023.
func (cv *converter) profile(field, key, profile string) string {
	switch profile {
	case "":
		return ""
	case v1alpha1.PKCS12Modern2023, v1alpha1.PKCS12Modern2026:
		return profile
	}
	cv.note("%s key %q asks for the PKCS#12 profile %q; trustsync writes no legacy profile, and writes it as %s (readable by Java 8u301 and later and by OpenSSL 3)", field, key, profile, v1alpha1.PKCS12Modern2023)
	return ""
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// inLine carries inline PEM over as a ClusterTrustBundle of its own, checked by the
// API server's own rules (size, CA certificates only, no anchor twice): one it would
// refuse is never printed as ready to apply.
func (cv *converter) inLine(pem string) {
	cv.inline++
	name := fmt.Sprintf("%s-inline-%d", cv.b.Name, cv.inline)
	b := &certificatesv1.ClusterTrustBundle{
		TypeMeta:   metav1.TypeMeta{APIVersion: "certificates.k8s.io/v1", Kind: "ClusterTrustBundle"},
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: pem}}
	cv.c.Bundles = append(cv.c.Bundles, b)
	cv.anchors = append(cv.anchors, v1alpha1.Source{Name: name})
	if errs := tsbundle.ValidateTrustBundle(field.NewPath("spec", "trustBundle"), pem); len(errs) > 0 {
		cv.refuse(b, fmt.Sprintf("ClusterTrustBundle %s (from the inline CAs) would be refused by the API server: %s; fix the PEM in the trust-manager object first", name, errs.ToAggregate()))
	}
}

// namespaced notes a source in trust-manager's trust namespace, which does not carry
// over; which names it in a refusal.
func (cv *converter) namespaced(which, what string) {
	cv.dropped = append(cv.dropped, which)
	cv.note("%s in trust-manager's trust namespace, is not carried over: trustsync distributes bundles, which anyone may read and only attesters may publish. Publish those anchors as a ClusterTrustBundle (cert-manager's CA as a signer's bundle, or `kubectl create` one from the PEM) and add it to the TrustTarget's sources by name", what)
}

// store is a truststore key; a password other than trustsync's is noted.
func (cv *converter) store(path, format string, password *string, def string) key {
	pw := def
	if password != nil {
		pw = *password
	}
	if pw != v1alpha1.DefaultStorePassword {
		cv.note("its %s store at key %q had password %q; trustsync's truststores use %q (a truststore's content is public): tell its readers", format, path, pw, v1alpha1.DefaultStorePassword)
	}
	return key{path: path, format: format}
}

// target makes the TrustTarget of one plan, refused when the controller would refuse
// it. Where the object writes both a ConfigMap and a Secret, the Secret's target is
// named <name>-secret.
func (cv *converter) target(p targetPlan, selector *metav1.LabelSelector, several bool) {
	name, kind := cv.b.Name, "configMap"
	if p.secret {
		kind = "secret"
		if several {
			name += "-secret"
		}
	}
	t := &v1alpha1.TrustTarget{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.TrustTargetResource.GroupVersion().String(), Kind: v1alpha1.TrustTargetKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"trustsync.io/converted-from": strings.ToLower(cv.b.Kind)}}}
	ref := &v1alpha1.ObjectRef{Name: cv.b.Name}
	if p.secret {
		t.Spec.Target.Secret = ref
		cv.note("it writes a Secret: trustsync writes Secrets only where the chart allows it (targets.secrets: true, which lets the controller read and write Secrets in every namespace); a ConfigMap target may serve, as the anchors are public")
	} else {
		t.Spec.Target.ConfigMap = ref
	}
	t.Spec.Target.NamespaceSelector = selector
	slices.SortStableFunc(p.keys, func(a, b key) int { return strings.Compare(a.format, b.format) })
	for _, k := range p.keys {
		for _, a := range cv.anchors {
			s := a
			s.Path, s.Format, s.PKCS12Profile = k.path, k.format, k.profile
			if s.Format == v1alpha1.FormatPEM {
				s.Format = ""
			}
			t.Spec.Sources = append(t.Spec.Sources, s)
		}
	}
	if len(p.keys) == 0 {
		cv.note("its %s target names no key; nothing would be written", kind)
	}
	cv.c.Targets = append(cv.c.Targets, t)
	var why []string
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		why = append(why, fmt.Sprintf("metadata.name %q: %s", name, strings.Join(errs, "; ")))
	} else if len(name) > 63 {
		why = append(why, fmt.Sprintf("metadata.name %q: a TrustTarget's name has at most 63 characters", name))
	}
	if len(cv.dropped) > 0 {
		why = append(why, fmt.Sprintf("%s not carried over (above), and without it the target would write fewer anchors than trust-manager did: publish those anchors as a ClusterTrustBundle, add it to the sources by name, then apply", strings.Join(cv.dropped, ", ")))
	}
	if _, err := v1alpha1.ParseTrustTargetSpec(&t.Spec); err != nil {
		why = append(why, err.Error())
	}
	if len(why) > 0 {
		cv.refuse(t, fmt.Sprintf("TrustTarget %q would be refused: %s", name, strings.Join(why, "; ")))
	}
}

func (cv *converter) refuse(obj any, why string) {
	cv.c.Refused = append(cv.c.Refused, Refusal{Object: obj, Why: why})
	cv.c.Targets = slices.DeleteFunc(cv.c.Targets, func(t *v1alpha1.TrustTarget) bool { return any(t) == obj })
}

func (cv *converter) refused(obj any) bool {
	return slices.ContainsFunc(cv.c.Refused, func(r Refusal) bool { return r.Object == obj })
}
