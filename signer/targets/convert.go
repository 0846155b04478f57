package targets

import (
	"fmt"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/sidecar/contract"
)

// TrustManagerBundle is the part of trust-manager's Bundle (trust.cert-manager.io
// v1alpha1) and ClusterBundle (trust-manager.io v1alpha2, the same fields) that a
// conversion reads.
type TrustManagerBundle struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
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
	} `json:"spec"`
}

type tmSourceObject struct {
	Name           string                `json:"name,omitempty"`
	Key            string                `json:"key,omitempty"`
	IncludeAllKeys bool                  `json:"includeAllKeys,omitempty"`
	Selector       *metav1.LabelSelector `json:"selector,omitempty"`
}

type tmTargetObject struct {
	Key string `json:"key,omitempty"`
}

type tmFormats struct {
	JKS    *tmStore `json:"jks,omitempty"`
	PKCS12 *tmStore `json:"pkcs12,omitempty"`
}

type tmStore struct {
	Key      string  `json:"key"`
	Password *string `json:"password,omitempty"`
}

// Conversion is what one trust-manager Bundle becomes: the TrustTarget, the bundles
// holding its inline anchors, and, plainly, what could not be carried over.
type Conversion struct {
	Target  *TrustTarget
	Bundles []*certificatesv1.ClusterTrustBundle
	Notes   []string
}

// FromTrustManager converts a trust-manager Bundle or ClusterBundle: the same sources
// written as the same keys of the same object (named after the Bundle) in the same
// namespaces.
func FromTrustManager(b *TrustManagerBundle) Conversion {
	c := Conversion{Target: &TrustTarget{TypeMeta: metav1.TypeMeta{APIVersion: Resource.GroupVersion().String(), Kind: Kind},
		ObjectMeta: metav1.ObjectMeta{Name: b.Name, Labels: map[string]string{"trustsync.io/converted-from": strings.ToLower(b.Kind)}}}}
	note := func(format string, args ...any) {
		c.Notes = append(c.Notes, fmt.Sprintf("%s %s: ", b.Kind, b.Name)+fmt.Sprintf(format, args...))
	}

	type key struct{ path, format string }
	var keys []key
	t := b.Spec.Target
	for _, obj := range []*tmTargetObject{t.ConfigMap, t.Secret} {
		if obj == nil {
			continue
		}
		if obj.Key != "" {
			keys = append(keys, key{obj.Key, contract.FormatPEM})
		}
	}
	if f := t.AdditionalFormats; f != nil {
		for format, s := range map[string]*tmStore{contract.FormatJKS: f.JKS, contract.FormatPKCS12: f.PKCS12} {
			if s == nil {
				continue
			}
			keys = append(keys, key{s.Key, format})
			// trust-manager's defaults: "changeit" for JKS, none for PKCS#12.
			password := contract.DefaultStorePassword
			if format == contract.FormatPKCS12 {
				password = ""
			}
			if s.Password != nil {
				password = *s.Password
			}
			if password != contract.DefaultStorePassword {
				note("its %s store at key %q had password %q; trustsync's truststores use %q (a truststore's content is public): tell its readers", format, s.Key, password, contract.DefaultStorePassword)
			}
		}
	}
	slices.SortStableFunc(keys, func(a, b key) int { return strings.Compare(a.format, b.format) })

	var anchors []contract.Source // each source once; copied onto every key
	inline := 0
	for i, s := range b.Spec.Sources {
		switch {
		case s.UseDefaultCAs != nil && *s.UseDefaultCAs:
			anchors = append(anchors, contract.Source{DefaultCAs: true})
		case s.InLine != nil:
			inline++
			name := fmt.Sprintf("%s-inline-%d", b.Name, inline)
			c.Bundles = append(c.Bundles, &certificatesv1.ClusterTrustBundle{
				TypeMeta:   metav1.TypeMeta{APIVersion: "certificates.k8s.io/v1", Kind: "ClusterTrustBundle"},
				ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: *s.InLine}})
			anchors = append(anchors, contract.Source{Name: name})
		case s.ConfigMap != nil || s.Secret != nil:
			kind, obj := "configMap", s.ConfigMap
			if s.Secret != nil {
				kind, obj = "secret", s.Secret
			}
			what := fmt.Sprintf("%s %q key %q", kind, obj.Name, obj.Key)
			if obj.Selector != nil || obj.IncludeAllKeys {
				what = fmt.Sprintf("%s objects selected by labels (or all their keys)", kind)
			}
			note("source %d, a %s in trust-manager's trust namespace, is not carried over: trustsync distributes bundles, which anyone may read and only attesters may publish. Publish those anchors as a ClusterTrustBundle (cert-manager's CA as a signer's bundle, or `kubectl create` one from the PEM) and add it to the TrustTarget's sources by name", i, what)
		default:
			note("source %d names no kind of source trustsync knows; left out", i)
		}
	}
	var sources []contract.Source
	for _, k := range keys {
		for _, a := range anchors {
			s := a
			s.Path, s.Format = k.path, k.format
			if s.Format == contract.FormatPEM {
				s.Format = ""
			}
			sources = append(sources, s)
		}
	}
	c.Target.Spec.Sources = sources
	name := b.Name
	switch {
	case t.ConfigMap != nil:
		c.Target.Spec.Target.ConfigMap = &ObjectRef{Name: name}
	case t.Secret != nil:
		c.Target.Spec.Target.Secret = &ObjectRef{Name: name}
		note("it writes a Secret: trustsync writes Secrets only where the chart allows it (targets.secrets: true, which lets the signer read every Secret); a ConfigMap target may serve, as the anchors are public")
	default:
		note("it names no target object; the TrustTarget writes a ConfigMap named %q", name)
		c.Target.Spec.Target.ConfigMap = &ObjectRef{Name: name}
	}
	c.Target.Spec.Target.NamespaceSelector = t.NamespaceSelector
	if len(keys) == 0 {
		note("it names no key; nothing would be written")
	}
	if len(anchors) == 0 {
		note("none of its sources is carried over; the TrustTarget has no source until you add one")
	}
	return c
}
