package reader

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/truststore"
	"github.com/trustsync/trustsync/trustreport/query"
)

// Contents reads once what the objects trustsync writes hold, in namespace ("" for
// every one, and the cluster-scoped caBundle objects), for a short-lived reader with
// its user's credentials: the TrustTargets' ConfigMaps and Secrets (by their label),
// the annotated ones, and annotated objects' caBundle fields, each key's anchors. A
// kind the user may not list (Secrets, for `view`) is skipped and said through warn,
// so that the answer says what it could not see.
func Contents(ctx context.Context, dyn dynamic.Interface, meta metadata.Interface, namespace string, warn func(string)) []query.ObjectContent {
	var out []query.ObjectContent
	skipped := func(what string, err error) {
		warn(fmt.Sprintf("%s not read, so not listed: %s", what, err))
	}
	for _, kind := range []string{v1alpha1.KindConfigMap, v1alpha1.KindSecret} {
		gvr := corev1.SchemeGroupVersion.WithResource("configmaps")
		if kind == v1alpha1.KindSecret {
			gvr = corev1.SchemeGroupVersion.WithResource("secrets")
		}
		add := func(u *unstructured.Unstructured, writer string) {
			for key, data := range objectData(u) {
				if ids, ok := anchorsIn(data); ok {
					out = append(out, query.ObjectContent{Kind: kind, Namespace: u.GetNamespace(), Name: u.GetName(), Key: key, Writer: writer, Anchors: ids})
				}
			}
		}
		// A TrustTarget's objects carry its label: one list finds them.
		targets, err := dyn.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.TargetLabel})
		if err != nil {
			skipped(kind+"s", err)
			continue
		}
		for i := range targets.Items {
			add(&targets.Items[i], v1alpha1.TrustTargetKind+" "+targets.Items[i].GetLabels()[v1alpha1.TargetLabel])
		}
		// Annotated ones only by their annotation: their metadata, then each one.
		list, err := meta.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			skipped("annotated "+kind+"s", err)
			continue
		}
		for _, m := range list.Items {
			if m.Annotations[v1alpha1.AnnotationInject] != "true" || m.Labels[v1alpha1.TargetLabel] != "" {
				continue
			}
			u, err := dyn.Resource(gvr).Namespace(m.Namespace).Get(ctx, m.Name, metav1.GetOptions{})
			if err != nil {
				skipped(kind+" "+m.Namespace+"/"+m.Name, err)
				continue
			}
			add(u, "annotation")
		}
	}
	if namespace != "" {
		return out
	}
	for _, k := range v1alpha1.CABundleKinds {
		list, err := meta.Resource(k.Resource).List(ctx, metav1.ListOptions{})
		if err != nil {
			if !apierrors.IsNotFound(err) {
				skipped(k.Kind+"s", err)
			}
			continue
		}
		for _, m := range list.Items {
			if m.Annotations[v1alpha1.AnnotationInject] != "true" {
				continue
			}
			u, err := dyn.Resource(k.Resource).Get(ctx, m.Name, metav1.GetOptions{})
			if err != nil {
				skipped(k.Kind+" "+m.Name, err)
				continue
			}
			for field, pemData := range caBundles(u) {
				if ids, ok := anchorsIn(pemData); ok {
					out = append(out, query.ObjectContent{Kind: k.Kind, Name: m.Name, Key: field, Writer: "annotation", Anchors: ids})
				}
			}
		}
	}
	return out
}

// objectData is a ConfigMap's data and binaryData, or a Secret's data, by key.
func objectData(u *unstructured.Unstructured) map[string][]byte {
	out := map[string][]byte{}
	for _, field := range []string{"data", "binaryData"} {
		m, _, _ := unstructured.NestedStringMap(u.Object, field)
		for k, v := range m {
			if u.GetKind() == "Secret" || field == "binaryData" {
				raw, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					continue
				}
				out[k] = raw
			} else {
				out[k] = []byte(v)
			}
		}
	}
	return out
}

// caBundles are an object's caBundle fields by path, decoded.
func caBundles(u *unstructured.Unstructured) map[string][]byte {
	out := map[string][]byte{}
	add := func(path string, encoded string) {
		if raw, err := base64.StdEncoding.DecodeString(encoded); err == nil && len(raw) > 0 {
			out[path] = raw
		}
	}
	webhooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
	for _, w := range webhooks {
		wm, ok := w.(map[string]any)
		if !ok {
			continue
		}
		name, _, _ := unstructured.NestedString(wm, "name")
		if ca, ok, _ := unstructured.NestedString(wm, "clientConfig", "caBundle"); ok {
			add(fmt.Sprintf("webhooks[%s].clientConfig.caBundle", name), ca)
		}
	}
	if ca, ok, _ := unstructured.NestedString(u.Object, "spec", "caBundle"); ok {
		add("spec.caBundle", ca)
	}
	if ca, ok, _ := unstructured.NestedString(u.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle"); ok {
		add("spec.conversion.webhook.clientConfig.caBundle", ca)
	}
	return out
}

// anchorsIn reads a key's anchors: PEM, or a truststore with the default password
// (what trustsync writes into objects); false for anything else.
func anchorsIn(data []byte) ([]string, bool) {
	var ders [][]byte
	var err error
	if utf8.Valid(data) {
		ders, err = bundle.DecodeCertificates(data)
	} else if ders, err = truststore.DecodePKCS12(data, v1alpha1.DefaultStorePassword); err != nil {
		ders, err = truststore.DecodeJKS(data, v1alpha1.DefaultStorePassword)
	}
	if err != nil || len(ders) == 0 {
		return nil, false
	}
	ids := make([]string, len(ders))
	for i, der := range ders {
		ids[i] = bundle.AnchorID(der)
	}
	slices.Sort(ids)
	return slices.Compact(ids), true
}
