package signer

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/cmd/kubectl-trustsync/plugin"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/poll"
)

// A rotation waits for what annotation injection fills from the signer's bundle, as
// the controller's index says it holds: an annotated ConfigMap, a webhook
// configuration's caBundle, and a pod mounting the ConfigMap (known to be a reader of
// trust only through the index). While the controller is stopped, the index keeps
// the old CA's content: `rotation` names both objects and the pod, and the new CA
// does not sign though the floor is 0. Once the controller runs again and the pod's
// node reports the new CA, the new CA signs, the Event counting the objects. An
// object in the index that does not read is named and leaves the others counted.
func TestSigner_ARotationWaitsForTheAnnotatedObjectsFilledFromItsBundle(t *testing.T) {
	const namespace, signer, appNS = "injected-signer", "example.com/injected", "injected-apps"
	index := namespace + "/" + v1alpha1.InjectedIndexName
	cp := planes.Get(t, true)
	ctx := context.Background()
	admin := kube(t, cp.AdminConfig())
	startObservedSigner(t, cp, namespace, signer, "--ca-propagation-max-wait=1h", "--ca-propagation-min-wait=0", "--injected-index="+index)
	controller := func() *controlplane.Process {
		p, err := cp.StartController("--namespace="+namespace, "--injected-index="+index, "--targets=false", "--federation=false")
		return untilTheEnd(t, "controller", p, err)
	}
	running := controller()
	cli := controlplane.NewPlugin(t, cp)
	var r plugin.Rotation
	rotation := signerRotation(t, cli, signer, &r)
	poll.True(t, time.Minute, "the signer's live bundle, Stable", func() bool { return rotation() == 0 && r.Phase == "Stable" })
	oldCA := r.CurrentCA

	sources := fmt.Sprintf(`[{"signerName": %q, "path": "ca.pem", "labelSelector": {"matchLabels": {"kubernetes.io/cluster-trust-bundle-version": "live"}}}]`, signer)
	annotations := map[string]string{"trustsync.io/inject": "true", "trustsync.io/sources": sources}
	controlplane.LabelledNamespace(t, admin, appNS, nil)
	if err := cp.CreateServiceAccount(ctx, appNS, "default"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps(appNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-trust", Annotations: annotations}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hook := "injected-" + fmt.Sprint(time.Now().UnixNano()%1000000)
	if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: hook, Annotations: annotations},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "check.injected.example.com", AdmissionReviewVersions: []string{"v1"},
			SideEffects:  ptr.To(admissionregistrationv1.SideEffectClassNone),
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://check.injected.example.com/validate")},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"nothings"}}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, hook, metav1.DeleteOptions{})
	})
	// A pod reading the annotated ConfigMap through a volume, running on a node
	// whose agent says it holds the old CA.
	pod, err := admin.CoreV1().Pods(appNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		Spec: corev1.PodSpec{NodeName: "node-injected", Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1",
			VolumeMounts: []corev1.VolumeMount{{Name: "trust", MountPath: "/etc/trust"}}}},
			Volumes: []corev1.Volume{{Name: "trust", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-trust"}}}}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "registry.example/app:1",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	if pod, err = admin.CoreV1().Pods(appNS).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	reportConfigMapReader(t, cp, pod, oldCA)

	listed := func(anchor string) bool {
		cm, err := admin.CoreV1().ConfigMaps(namespace).Get(ctx, v1alpha1.InjectedIndexName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		idx, err := v1alpha1.ParseInjectedIndex(cm.Data[v1alpha1.InjectedIndexKey])
		if err != nil {
			t.Fatalf("the controller's index does not read: %v", err)
		}
		n := 0
		for _, o := range idx.Objects {
			if (o.Ref() == "ConfigMap "+appNS+"/app-trust" || o.Ref() == "ValidatingWebhookConfiguration "+hook) && slices.Contains(o.Anchors, anchor) {
				n++
			}
		}
		return n == 2 && cm.Labels[v1alpha1.InjectedIndexLabel] == "true"
	}
	poll.True(t, time.Minute, "the index listing the ConfigMap and the webhook configuration, holding the current CA", func() bool { return listed(oldCA) })

	running.Stop(10 * time.Second)
	requestRotation(t, cp, namespace, signer)
	poll.True(t, time.Minute, "the new CA waiting for the annotated objects and their reader", func() bool {
		return rotation() == 3 && r.Phase == "Waiting" && len(r.Objects) == 2
	})
	newCA := r.NewCA
	var named []string
	for _, o := range r.Objects {
		if o.Writer != v1alpha1.WriterAnnotation || o.Holding != 0 || o.Expected != 1 {
			t.Errorf("an annotated object as rotation names it: %+v; want writer annotation, 0 of 1 holding", o)
		}
		named = append(named, o.Kind+" "+o.Namespace+"/"+o.Name)
	}
	if want := []string{"ConfigMap " + appNS + "/app-trust", "ValidatingWebhookConfiguration /" + hook}; !slices.Equal(named, want) {
		t.Errorf("rotation names %q; want %q", named, want)
	}
	if r.Expected != 1 || len(r.Stragglers) != 1 || r.Stragglers[0].Pod != "reader" || r.Stragglers[0].Reason != "Behind" {
		t.Errorf("the pod mounting the annotated ConfigMap: %d expected, stragglers %+v; want it counted and Behind", r.Expected, r.Stragglers)
	}
	waitEvent(t, cp, namespace, signer, "RotationWaiting", "annotated ValidatingWebhookConfiguration "+hook+" (its content does not hold it yet)")
	if rotation(); r.Phase != "Waiting" {
		t.Fatalf("the new CA signs while the annotated objects lack it: %+v", r)
	}

	// An object in the index that no controller would write (a hand edit) is named,
	// and leaves the others counted.
	cm, err := admin.CoreV1().ConfigMaps(namespace).Get(ctx, v1alpha1.InjectedIndexName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[v1alpha1.InjectedIndexKey] = strings.Replace(cm.Data[v1alpha1.InjectedIndexKey], `{"objects":[`, `{"objects":[{"kind":"ConfigMap","name":"forged","sources":[]},`, 1)
	if _, err := admin.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, time.Minute, "rotation naming the object that does not read", func() bool {
		return rotation() == 3 && len(r.Unobserved) == 1 && strings.Contains(r.Unobserved[0], "ConfigMap forged")
	})
	if len(r.Objects) != 2 || r.Expected != 1 {
		t.Errorf("with one object of the index unreadable, rotation counts %d objects and %d pods; want the 2 objects and the pod still counted", len(r.Objects), r.Expected)
	}

	controller()
	poll.True(t, time.Minute, "the index listing both objects holding the new CA", func() bool { return listed(newCA) })
	if rotation(); r.Phase != "Waiting" || r.CurrentCA != oldCA {
		t.Fatalf("the new CA signs while the pod reading the ConfigMap is not seen holding it: %+v", r)
	}
	reportConfigMapReader(t, cp, pod, oldCA, newCA)
	poll.True(t, time.Minute, "the new CA signing once the objects and their reader hold it", func() bool { return rotation() == 0 && r.Phase == "Stable" && r.CurrentCA == newCA })
	waitEvent(t, cp, namespace, signer, "RotationProceeded", "all 1 pods selecting")
	if out, _ := cli.Run(t, "who-trusts", newCA, "-A", "-o", "json"); !strings.Contains(out, "app-trust") || !strings.Contains(out, hook) {
		t.Errorf("who-trusts the new CA names neither the ConfigMap nor the webhook configuration:\n%s", out)
	}
}

// reportConfigMapReader makes pod's node report that the ca.pem of its configMap
// volume "trust" holds anchors.
func reportConfigMapReader(t *testing.T, cp *controlplane.ControlPlane, pod *corev1.Pod, anchors ...string) {
	t.Helper()
	anchors = slices.Sorted(slices.Values(anchors))
	id := v1alpha1.AnchorSetID(anchors)
	r := &v1alpha1.NodeTrustReport{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.NodeTrustReportKind},
		ObjectMeta: metav1.ObjectMeta{Name: pod.Spec.NodeName}, Node: pod.Spec.NodeName, UpdatedAt: metav1.Now(),
		AnchorSets: []v1alpha1.AnchorSet{{ID: id, Anchors: anchors, Count: len(anchors)}},
		Pods: []v1alpha1.PodHolding{{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID),
			Files: []v1alpha1.FileHolding{{Path: "/etc/trust/ca.pem", Volume: "trust", File: "ca.pem", Delivery: string(v1alpha1.DeliveryConfigMap), AnchorSet: id}}}}}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r)
	if err != nil {
		t.Fatal(err)
	}
	putReport(t, cp, &unstructured.Unstructured{Object: m})
}
