// Package kubeclient makes the small REST clients the pipeline's stages use: core/v1
// (ConfigMaps, Secrets, Events) and CertificateSigningRequests, each decoding only the
// types it needs. A sidecar runs in every pod that asks for trust, so it avoids
// client-go's clientset and its scheme of every API group: even registering all of
// core/v1 costs ~0.3 MiB of resident memory (docs/benchmarks.md).
package kubeclient

import (
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// CoreScheme knows the six core/v1 types the pipeline reads and writes, nothing more.
var CoreScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(corev1.SchemeGroupVersion,
		&corev1.ConfigMap{}, &corev1.ConfigMapList{}, &corev1.Secret{}, &corev1.SecretList{}, &corev1.Event{}, &corev1.EventList{})
	metav1.AddToGroupVersion(s, corev1.SchemeGroupVersion)
	return s
}()

// Core is a REST client for core/v1 alone: ConfigMaps, Secrets, Events.
func Core(base *rest.Config) (rest.Interface, error) {
	return restClientFor(base, "/api", corev1.SchemeGroupVersion, CoreScheme)
}

// csrScheme knows CertificateSigningRequests alone, for the workload certificate.
var csrScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(certificatesv1.SchemeGroupVersion, &certificatesv1.CertificateSigningRequest{}, &certificatesv1.CertificateSigningRequestList{})
	metav1.AddToGroupVersion(s, certificatesv1.SchemeGroupVersion)
	return s
}()

// CSRs is a REST client for certificates.k8s.io/v1 CertificateSigningRequests.
func CSRs(base *rest.Config) (rest.Interface, error) {
	return restClientFor(base, "/apis", certificatesv1.SchemeGroupVersion, csrScheme)
}

// podScheme knows Pods alone, for the node agent's watch of its node's pods.
var podScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(corev1.SchemeGroupVersion, &corev1.Pod{}, &corev1.PodList{})
	metav1.AddToGroupVersion(s, corev1.SchemeGroupVersion)
	return s
}()

// Pods is a REST client for core/v1 Pods alone.
func Pods(base *rest.Config) (rest.Interface, error) {
	return restClientFor(base, "/api", corev1.SchemeGroupVersion, podScheme)
}

// restClientFor is a REST client for one group version that decodes only what scheme
// knows.
func restClientFor(base *rest.Config, apiPath string, gv schema.GroupVersion, scheme *runtime.Scheme) (rest.Interface, error) {
	cfg := rest.CopyConfig(base)
	cfg.APIPath = apiPath
	cfg.GroupVersion = &gv
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	return rest.RESTClientFor(cfg)
}
