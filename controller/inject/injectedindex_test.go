package inject

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

func indexed(ns, name string) v1alpha1.InjectedObject {
	return v1alpha1.InjectedObject{Kind: v1alpha1.KindConfigMap, Namespace: ns, Name: name, Sources: []v1alpha1.Source{{Name: "corp", Path: "ca.pem"}},
		Anchors: []string{strings.Repeat("a", 64)}}
}

func TestInjectedIndex_ARestartKeepsWhatItListedUntilEachObjectIsSeenAgain(t *testing.T) {
	ctx := context.Background()
	ref := types.NamespacedName{Namespace: "trustsync", Name: v1alpha1.InjectedIndexName}
	before, _ := v1alpha1.EncodeInjectedIndex([]v1alpha1.InjectedObject{indexed("a", "kept"), indexed("b", "gone")})
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name},
		Data: map[string]string{v1alpha1.InjectedIndexKey: before}})
	x := newInjectedIndex(client, ref)
	keyOf := func(o v1alpha1.InjectedObject) (string, bool) { return o.Namespace + "/" + o.Name, true }
	if err := x.seed(ctx, keyOf); err != nil {
		t.Fatal(err)
	}
	if err := x.publish(ctx); err != nil {
		t.Fatal(err)
	}
	if acts := len(client.Actions()); acts != 1 {
		t.Errorf("%d calls after seeding an unchanged index; want only the read", acts)
	}

	x.keepOnly(func(key string) bool { return key == "a/kept" })
	x.set("c/new", indexed("c", "new"))
	if err := x.publish(ctx); err != nil {
		t.Fatal(err)
	}
	cm, err := client.CoreV1().ConfigMaps(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	idx, err := v1alpha1.ParseInjectedIndex(cm.Data[v1alpha1.InjectedIndexKey])
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, o := range idx.Objects {
		refs = append(refs, o.Ref())
	}
	if got := strings.Join(refs, ", "); got != "ConfigMap a/kept, ConfigMap c/new" {
		t.Errorf("the index lists %s; want the object still asking and the new one, not the one gone", got)
	}
	if cm.Labels[v1alpha1.InjectedIndexLabel] != "true" {
		t.Errorf("the index's labels %v; want %s=true, by which readers find it", cm.Labels, v1alpha1.InjectedIndexLabel)
	}

	x.forget("c/new")
	x.forget("c/new")
	if err := x.publish(ctx); err != nil {
		t.Fatal(err)
	}
	cm, _ = client.CoreV1().ConfigMaps(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if strings.Contains(cm.Data[v1alpha1.InjectedIndexKey], `"new"`) {
		t.Errorf("a forgotten object is still listed: %s", cm.Data[v1alpha1.InjectedIndexKey])
	}
}

func TestInjectedIndex_AnIndexThatDoesNotReadIsWrittenAgain(t *testing.T) {
	ctx := context.Background()
	ref := types.NamespacedName{Namespace: "trustsync", Name: v1alpha1.InjectedIndexName}
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name},
		Data: map[string]string{v1alpha1.InjectedIndexKey: "{not json"}})
	x := newInjectedIndex(client, ref)
	if err := x.seed(ctx, func(v1alpha1.InjectedObject) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	x.set("a/x", indexed("a", "x"))
	if err := x.publish(ctx); err != nil {
		t.Fatal(err)
	}
	cm, _ := client.CoreV1().ConfigMaps(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if _, err := v1alpha1.ParseInjectedIndex(cm.Data[v1alpha1.InjectedIndexKey]); err != nil {
		t.Errorf("the index after a write: %v", err)
	}
}

func TestInjectedIndex_TheChartsEmptyConfigMapIsWrittenAsTheIndex(t *testing.T) {
	ctx := context.Background()
	ref := types.NamespacedName{Namespace: "trustsync", Name: v1alpha1.InjectedIndexName}
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name,
		Labels: map[string]string{"app.kubernetes.io/managed-by": "Helm"}}})
	x := newInjectedIndex(client, ref)
	if err := x.seed(ctx, func(v1alpha1.InjectedObject) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	if err := x.publish(ctx); err != nil {
		t.Fatal(err)
	}
	cm, _ := client.CoreV1().ConfigMaps(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if idx, err := v1alpha1.ParseInjectedIndex(cm.Data[v1alpha1.InjectedIndexKey]); err != nil || len(idx.Objects) != 0 {
		t.Errorf("the index written over the chart's empty ConfigMap: %+v, %v; want an empty index", idx, err)
	}
}
