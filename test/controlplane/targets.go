package controlplane

import (
	"context"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/test/fixtures"
)

// CreateTarget creates a TrustTarget with spec; it is deleted
// when the test ends.
func CreateTarget(t testing.TB, cp *ControlPlane, name string, spec map[string]any) {
	t.Helper()
	c := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.TrustTargetResource)
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "trustsync.io/v1alpha1", "kind": v1alpha1.TrustTargetKind,
		"metadata": map[string]any{"name": name}, "spec": spec}}
	if _, err := c.Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// TargetStatus is the target's status now.
func TargetStatus(t testing.TB, cp *ControlPlane, name string) v1alpha1.TrustTargetStatus {
	t.Helper()
	u, err := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.TrustTargetResource).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tt, err := v1alpha1.TrustTargetFromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	return tt.Status
}

// WaitTargetReason waits until the target's Ready condition has reason, and returns the status.
func WaitTargetReason(t testing.TB, cp *ControlPlane, name, reason string) v1alpha1.TrustTargetStatus {
	t.Helper()
	var st v1alpha1.TrustTargetStatus
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		st = TargetStatus(t, cp, name)
		for _, c := range st.Conditions {
			if c.Type == v1alpha1.ConditionReady && c.Reason == reason {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("TrustTarget %s never said %s: %+v", name, reason, st)
	}
	return st
}

func ReadyMessage(st v1alpha1.TrustTargetStatus) string {
	for _, c := range st.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			return c.Message
		}
	}
	return ""
}

// NativeBundle creates a native bundle holding anchors, deleted when the test ends.
func NativeBundle(t testing.TB, client kubernetes.Interface, name string, anchors ...*fixtures.Cert) {
	t.Helper()
	if _, err := client.CertificatesV1().ClusterTrustBundles().Create(context.Background(), &certificatesv1.ClusterTrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: fixtures.Bundle(anchors...)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CertificatesV1().ClusterTrustBundles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// SetNativeBundle makes the native bundle name hold anchors, retrying a conflict.
func SetNativeBundle(t testing.TB, client kubernetes.Interface, name string, anchors ...*fixtures.Cert) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		b, err := client.CertificatesV1().ClusterTrustBundles().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		b.Spec.TrustBundle = fixtures.Bundle(anchors...)
		_, err = client.CertificatesV1().ClusterTrustBundles().Update(ctx, b, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// LabelledNamespace creates a namespace with labels; it is deleted when the test ends.
func LabelledNamespace(t testing.TB, client kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// ConfigMapKey is the value of key in namespace's ConfigMap name, and whether it has
// the key (false too when there is no such ConfigMap).
func ConfigMapKey(t testing.TB, client kubernetes.Interface, namespace, name, key string) (string, bool) {
	t.Helper()
	cm, err := client.CoreV1().ConfigMaps(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return "", false
	}
	v, ok := cm.Data[key]
	return v, ok
}
