package controller

import (
	"bytes"
	"context"
	"encoding/asn1"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"software.sslmate.com/src/go-pkcs12"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/truststore"

	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// An existing ConfigMap annotated to ask for a bundle gets it as the key its
// annotations name, kept current, and another tool's key beside it survives; a key
// another tool owns is not taken, and a Warning Event on the ConfigMap says so.
func TestInject_AnnotatedConfigMapGetsTheBundleAndKeepsOtherKeys(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller log:\n%s", controllers[cp].Tail())
		}
	})
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	rootA, rootB := fixtures.CA("inject A"), fixtures.CA("inject B")
	controlplane.NativeBundle(t, client, "inject-"+run, rootA)
	controlplane.LabelledNamespace(t, client, "inject-"+run, nil)
	ns := "inject-" + run
	annotations := map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "inject-" + run, "trustsync.io/path": "ca.crt"}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-trust", Annotations: annotations},
		Data: map[string]string{"app.conf": "the app's own"}}, metav1.CreateOptions{FieldManager: "helm"}); err != nil {
		t.Fatal(err)
	}
	holds := func(anchors ...*fixtures.Cert) bool {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "app-trust", metav1.GetOptions{})
		if err != nil || cm.Data["app.conf"] != "the app's own" {
			return false
		}
		got, err := bundle.AnchorIDs([]byte(cm.Data["ca.crt"]))
		return err == nil && slices.Equal(got, ids(anchors...))
	}
	poll.True(t, time.Minute, "the annotated ConfigMap holding A beside the app's key", func() bool { return holds(rootA) })
	controlplane.SetNativeBundle(t, client, "inject-"+run, rootA, rootB)
	poll.True(t, time.Minute, "the annotated ConfigMap holding A and B", func() bool { return holds(rootA, rootB) })
	waitEventOn(t, client, ns, "app-trust", "TrustInjected", "Wrote keys ca.crt from bundle inject-"+run)

	// A key another tool owns.
	owned := map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "inject-" + run, "trustsync.io/path": "ca.crt"}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owned", Annotations: owned},
		Data: map[string]string{"ca.crt": "another tool's"}}, metav1.CreateOptions{FieldManager: "another-tool"}); err != nil {
		t.Fatal(err)
	}
	waitEventOn(t, client, ns, "owned", "TrustInjectFailed", "another manager owns a key the annotations name")
	if cm, _ := client.CoreV1().ConfigMaps(ns).Get(ctx, "owned", metav1.GetOptions{}); cm.Data["ca.crt"] != "another tool's" {
		t.Errorf("another tool's key was taken: %q", cm.Data["ca.crt"])
	}
}

// A ValidatingWebhookConfiguration annotated with a bundle gets it as every webhook's
// caBundle, and the API server keeps calling the webhook through a CA rotation: the
// bundle holds the old and the new CA, the server switches to a certificate of the
// new one, then the bundle drops the old.
func TestInject_WebhookCABundleFollowsTheBundleThroughARotation(t *testing.T) {
	cp := planes.Get(t, true)
	client := kube(t, cp.AdminConfig())
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	oldCA, newCA := fixtures.CA("webhook CA old"), fixtures.CA("webhook CA new")
	bundle := "webhook-ca-" + run
	controlplane.NativeBundle(t, client, bundle, oldCA)
	controlplane.LabelledNamespace(t, client, "webhooked-"+run, nil)
	controlplane.WebhookCABundleRotation(t, client, bundle, "webhooked-"+run, oldCA, newCA, func(anchors ...*fixtures.Cert) { controlplane.SetNativeBundle(t, client, bundle, anchors...) })
}

// waitEventOn waits for an Event of reason on namespace/name whose message contains want.
func waitEventOn(t *testing.T, client kubernetes.Interface, namespace, name, reason, want string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		events, err := client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range events.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == reason && strings.Contains(e.Message, want) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s Event on %s/%s saying %q; its Events: %q", reason, namespace, name, want, seen)
	}
}

// An APIService and a CRD with a conversion webhook, annotated with a bundle, get it
// as their caBundle.
func TestInject_APIServiceAndCRDConversionGetTheirCABundle(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	ca := fixtures.CA("apiservice CA")
	bundleName := "api-ca-" + run
	controlplane.NativeBundle(t, client, bundleName, ca)
	annotations := map[string]any{"trustsync.io/inject": "true", "trustsync.io/bundle-name": bundleName}
	dyn := dynamic.NewForConfigOrDie(cp.AdminConfig())
	group := "inject" + run + ".example.com"
	objects := []struct {
		gvr    schema.GroupVersionResource
		obj    map[string]any
		fields []string
	}{
		{gvr: schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}, fields: []string{"spec", "caBundle"},
			obj: map[string]any{"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": map[string]any{"name": "v1." + group, "annotations": annotations},
				"spec": map[string]any{"group": group, "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10,
					"service": map[string]any{"namespace": "default", "name": "inject-api", "port": 443}}}},
		{gvr: schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}, fields: []string{"spec", "conversion", "webhook", "clientConfig", "caBundle"},
			obj: map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": map[string]any{"name": "widgets." + group, "annotations": annotations},
				"spec": map[string]any{"group": group, "scope": "Namespaced", "names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
					"versions": []any{
						map[string]any{"name": "v1", "served": true, "storage": true, "schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
						map[string]any{"name": "v2", "served": true, "storage": false, "schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
					"conversion": map[string]any{"strategy": "Webhook", "webhook": map[string]any{"conversionReviewVersions": []any{"v1"},
						"clientConfig": map[string]any{"service": map[string]any{"namespace": "default", "name": "inject-convert", "path": "/convert", "port": 443}}}}}}},
	}
	for _, o := range objects {
		u := &unstructured.Unstructured{Object: o.obj}
		if _, err := dyn.Resource(o.gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = dyn.Resource(o.gvr).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{}) })
		poll.True(t, time.Minute, u.GetKind()+"'s caBundle holding the bundle", func() bool {
			got, err := dyn.Resource(o.gvr).Get(ctx, u.GetName(), metav1.GetOptions{})
			if err != nil {
				return false
			}
			b64, _, _ := unstructured.NestedString(got.Object, o.fields...)
			pem, err := base64.StdEncoding.DecodeString(b64)
			return err == nil && string(pem) == string(ca.CertPEM())
		})
	}
}

// One tenant cannot stop the controller every tenant shares: 45 ConfigMaps asking for
// the public roots 32 times each (7 MB apiece, more than an object holds) are refused
// before anything is sent, each with a Warning Event, the controller's memory grows
// by a bounded amount rather than by their size (they cost 9 MiB each and OOM-killed
// it at the chart's limit), and an ordinary annotated ConfigMap beside them is filled.
func TestInject_ATenantCannotExhaustTheController(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	ns := "greedy-" + run
	controlplane.LabelledNamespace(t, client, ns, nil)
	root := fixtures.CA("greedy neighbour")
	controlplane.NativeBundle(t, client, "greedy-"+run, root)
	pid := controllers[cp].Pid()
	before, err := controlplane.ProcStatusKiB(pid, "VmRSS:")
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for i := range 32 {
		sources = append(sources, fmt.Sprintf(`{"defaultCAs": true, "path": "roots-%d.pem"}`, i))
	}
	greedy := map[string]string{"trustsync.io/inject": "true", "trustsync.io/sources": "[" + strings.Join(sources, ",") + "]"}
	const n = 45
	for i := range n {
		if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("greedy-%02d", i), Annotations: greedy}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		waitEventOn(t, client, ns, fmt.Sprintf("greedy-%02d", i), "TrustInjectTooLarge", "more than one object holds (1048576)")
	}
	after, err := controlplane.ProcStatusKiB(pid, "VmRSS:")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the controller's RSS: %d MiB before, %d MiB after %d refused ConfigMaps", before>>10, after>>10, n)
	if grew := (after - before) >> 10; grew > 100 {
		t.Errorf("the controller's RSS grew by %d MiB for %d refused ConfigMaps; want a bounded cost (under 100 MiB), not one per object", grew, n)
	}
	if controllers[cp].Exited() {
		t.Fatal("the controller exited")
	}
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "greedy-00", metav1.GetOptions{})
	if err != nil || len(cm.Data) != 0 {
		t.Errorf("a refused ConfigMap was written: %d keys (%v)", len(cm.Data), err)
	}

	annotations := map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "greedy-" + run, "trustsync.io/path": "ca.crt"}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "modest", Annotations: annotations}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, time.Minute, "the modest ConfigMap beside them filled", func() bool {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "modest", metav1.GetOptions{})
		return err == nil && cm.Data["ca.crt"] == string(root.CertPEM())
	})
}

// hostilePKCS12 is a PKCS#12 truststore holding root whose MAC asks for 2^62
// iterations (673 bytes in the attack): the library took the count from the file and
// derived for ever.
func hostilePKCS12(t *testing.T, root *fixtures.Cert) []byte {
	t.Helper()
	data, err := pkcs12.Modern2023.EncodeTrustStoreEntries([]pkcs12.TrustStoreEntry{{Cert: root.Cert, FriendlyName: "root"}}, "changeit")
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Version  int
		AuthSafe asn1.RawValue
		MacData  struct {
			Mac        asn1.RawValue
			MacSalt    []byte
			Iterations int
		}
	}
	if _, err := asn1.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	p.MacData.Iterations = 1 << 62
	out, err := asn1.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// One tenant's truststores cannot stop the controller every tenant shares: two
// annotated ConfigMaps whose existing PKCS#12 keys ask for 2^62 MAC iterations (one
// for each injection worker; the controller used to spin on both for ever, filling no
// ConfigMap of any tenant) are refused as out of bounds and written anew (the tenant
// applied them as the controller's field manager, so they are the controller's to
// write), and an ordinary annotated ConfigMap in another namespace is filled.
func TestInject_AHostileTruststoreStopsNoOneElsesInjection(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	hostile, other := "hostile-"+run, "neighbour-"+run
	controlplane.LabelledNamespace(t, client, hostile, nil)
	controlplane.LabelledNamespace(t, client, other, nil)
	root := fixtures.CA("hostile store's neighbour")
	controlplane.NativeBundle(t, client, "stores-"+run, root)
	store := hostilePKCS12(t, fixtures.CA("hostile"))
	annotations := map[string]string{"trustsync.io/inject": "true", "trustsync.io/sources": `[{"name": "stores-` + run + `", "path": "trust.p12", "format": "pkcs12"}]`}
	for _, name := range []string{"spin-a", "spin-b"} {
		// The key applied as the controller's own field manager: the controller's
		// first rendering reads it back as what it wrote before.
		if _, err := client.CoreV1().ConfigMaps(hostile).Apply(ctx, applycorev1.ConfigMap(name, hostile).WithBinaryData(map[string][]byte{"trust.p12": store}),
			metav1.ApplyOptions{FieldManager: "trustsync-inject", Force: true}); err != nil {
			t.Fatal(err)
		}
		cm, err := client.CoreV1().ConfigMaps(hostile).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Annotations = annotations
		if _, err := client.CoreV1().ConfigMaps(hostile).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	modest := map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "stores-" + run, "trustsync.io/path": "ca.crt"}
	if _, err := client.CoreV1().ConfigMaps(other).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "modest", Annotations: modest}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, time.Minute, "the neighbour's ConfigMap filled", func() bool {
		cm, err := client.CoreV1().ConfigMaps(other).Get(ctx, "modest", metav1.GetOptions{})
		return err == nil && cm.Data["ca.crt"] == string(root.CertPEM())
	})
	for _, name := range []string{"spin-a", "spin-b"} {
		poll.True(t, time.Minute, name+" written anew with the bundle's anchor", func() bool {
			cm, err := client.CoreV1().ConfigMaps(hostile).Get(ctx, name, metav1.GetOptions{})
			if err != nil || bytes.Equal(cm.BinaryData["trust.p12"], store) {
				return false
			}
			ders, err := truststore.DecodePKCS12(cm.BinaryData["trust.p12"], "changeit")
			return err == nil && len(ders) == 1 && bytes.Equal(ders[0], root.Cert.Raw)
		})
	}
	if controllers[cp].Exited() {
		t.Fatal("the controller exited")
	}
}

// A write of an annotated object the API server refuses is tried again with the
// queue's backoff: once the refusal ends (here an admission policy refusing every
// write in the namespace, withdrawn), the object is filled within seconds, without
// waiting for a change of the object or the 10-minute resync.
func TestInject_AWriteRefusedOnceIsWrittenByTheRetry(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	ns := "refused-" + run
	controlplane.LabelledNamespace(t, client, ns, map[string]string{"e2e-refuse-writes": run})
	root := fixtures.CA("refused once")
	controlplane.NativeBundle(t, client, "refused-"+run, root)
	policies := client.AdmissionregistrationV1()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "refuse-writes-" + run},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "the-controller", Expression: "request.options.?fieldManager.orValue('') == 'trustsync-inject'"}},
			Validations:     []admissionregistrationv1.Validation{{Expression: "false", Message: "writes refused for now"}},
		}}
	if _, err := policies.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = policies.ValidatingAdmissionPolicies().Delete(ctx, policy.Name, metav1.DeleteOptions{}) })
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-refuse-writes": run}}}}}
	if _, err := policies.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = policies.ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
	})
	// The policy is in force once it refuses a write like the controller's.
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, time.Minute, "the admission policy refusing the controller's writes", func() bool {
		_, err := client.CoreV1().ConfigMaps(ns).Update(ctx, probe, metav1.UpdateOptions{FieldManager: "trustsync-inject"})
		return err != nil && strings.Contains(err.Error(), "writes refused for now")
	})

	annotations := map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "refused-" + run, "trustsync.io/path": "ca.crt"}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-trust", Annotations: annotations}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEventOn(t, client, ns, "app-trust", "TrustInjectFailed", "writes refused for now")
	if err := policies.ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 30*time.Second, "the refused ConfigMap written by a retry", func() bool {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "app-trust", metav1.GetOptions{})
		return err == nil && cm.Data["ca.crt"] == string(root.CertPEM())
	})
}
