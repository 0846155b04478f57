package injector

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/policy"
)

var AnnotationDelivery = annotation("delivery")

// NativeAPIs are the native APIs the cluster serves, which delivery native needs.
type NativeAPIs struct {
	// ClusterTrustBundles: certificates.k8s.io/v1 ClusterTrustBundles (for bundle sources).
	ClusterTrustBundles bool
	// PodCertificates: certificates.k8s.io/v1 PodCertificateRequests (for a certificate).
	PodCertificates bool
}

// sidecarOnly are the annotations that configure the sidecar itself: with no sidecar
// they would be silently ignored, so delivery native refuses them.
var sidecarOnly = []string{AnnotationSidecarMode, AnnotationCPURequest, AnnotationMemoryRequest, AnnotationMemoryLimit, AnnotationVolumeSize}

// nativeKeyTypes are the key types a podCertificate volume takes.
var nativeKeyTypes = policy.PodCertificateKeyTypes

// checkNative refuses, naming the annotation and why, everything delivery native
// cannot do: what only the sidecar offers, and APIs the cluster does not serve.
func checkNative(a map[string]string, r *request, cfg Config) field.ErrorList {
	var errs field.ErrorList
	invalid := func(key, msg string) {
		errs = append(errs, field.Invalid(annotationPath(key), a[key], "with "+AnnotationDelivery+": native, "+msg))
	}
	for _, key := range sidecarOnly {
		if _, set := a[key]; set {
			invalid(key, "there is no sidecar for it to configure; remove it")
		}
	}
	for _, key := range []string{AnnotationReloadURL, AnnotationReloadSignal, AnnotationReloadContainer, AnnotationReloadSettle} {
		if _, set := a[key]; set {
			invalid(key, fmt.Sprintf("the kubelet updates the files without telling the app, so nothing would reload it; use %s: sidecar", AnnotationDelivery))
		}
	}
	sourcesKey := listKey(a)
	if sourcesKey == "" {
		sourcesKey = AnnotationSignerName
		if _, ok := a[AnnotationBundleName]; ok {
			sourcesKey = AnnotationBundleName
		}
	}
	paths := map[string]int{}
	for _, s := range r.sources {
		paths[s.Path]++
		switch {
		case s.ConfigMap != nil || s.Secret != nil:
			invalid(sourcesKey, fmt.Sprintf("the ConfigMap or Secret source for %q is read by the sidecar alone (the kubelet would copy the key unchecked, keys and all); use %s: sidecar", s.Path, AnnotationDelivery))
		case s.DefaultCAs:
			invalid(sourcesKey, fmt.Sprintf("the public roots for %q are added by the sidecar alone; use %s: sidecar", s.Path, AnnotationDelivery))
		case s.FileFormat() != v1alpha1.FormatPEM:
			key := sourcesKey
			if _, ok := a[AnnotationFormat]; ok {
				key = AnnotationFormat
			}
			invalid(key, fmt.Sprintf("%q would be PEM: the kubelet writes no %s truststore; use %s: sidecar", s.Path, s.Format, AnnotationDelivery))
		}
	}
	for _, s := range r.sources {
		if n := paths[s.Path]; n > 1 {
			invalid(sourcesKey, fmt.Sprintf("%d sources write %q, and merging them into one file is the sidecar's; give each its own path or use %s: sidecar", n, s.Path, AnnotationDelivery))
			paths[s.Path] = 0
		}
	}
	if len(r.sources) > 0 && !cfg.NativeAPIs.ClusterTrustBundles {
		invalid(AnnotationDelivery, "the API server does not serve certificates.k8s.io/v1 ClusterTrustBundles, which the kubelet projects (Kubernetes 1.37 or later); use "+AnnotationDelivery+": sidecar")
	}
	if c := r.certificate; c != nil {
		if !cfg.NativeAPIs.PodCertificates {
			invalid(AnnotationDelivery, "the API server does not serve certificates.k8s.io/v1 PodCertificateRequests, which a podCertificate volume needs (Kubernetes 1.37 or later); use "+AnnotationDelivery+": sidecar")
		}
		if c.expirationSeconds != 0 && c.expirationSeconds < 3600 {
			invalid(AnnotationCertificateExpiration, "a podCertificate volume's certificate lives at least 3600 seconds (1 hour)")
		}
	}
	return errs
}

// nativeVolume is the projected volume delivery native gives the pod: a
// clusterTrustBundle source per bundle source and a podCertificate source for the
// certificate, at the paths the sidecar would write, so switching delivery changes no
// file the app reads.
func nativeVolume(name string, r *request, uid *int64) corev1.Volume {
	var sources []corev1.VolumeProjection
	for _, s := range r.sources {
		ctb := &corev1.ClusterTrustBundleProjection{Path: s.Path, Optional: ptr.To(s.Optional)}
		if s.Name != "" {
			ctb.Name = ptr.To(s.Name)
		} else {
			ctb.SignerName, ctb.LabelSelector = ptr.To(s.SignerName), s.LabelSelector
		}
		sources = append(sources, corev1.VolumeProjection{ClusterTrustBundle: ctb})
	}
	if c := r.certificate; c != nil {
		pc := &corev1.PodCertificateProjection{
			SignerName: c.signer, KeyType: c.keyType, KeyPath: v1alpha1.FileKey, CertificateChainPath: v1alpha1.FileCertificate,
			// The app's uid owns the key, as the sidecar would write it, where the API
			// server keeps the field (the AtomicWriteVolumeUserFields gate).
			User: uid,
		}
		if c.expirationSeconds != 0 {
			pc.MaxExpirationSeconds = ptr.To(c.expirationSeconds)
		}
		if c.credentialBundle {
			pc.CredentialBundlePath = v1alpha1.FileCredentialBundle
		}
		if len(c.dnsNames) > 0 {
			pc.UserAnnotations = map[string]string{policy.PodCertificateDNSNamesAnnotation: strings.Join(c.dnsNames, ",")}
		}
		sources = append(sources, corev1.VolumeProjection{PodCertificate: pc})
	}
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: sources}}}
}
