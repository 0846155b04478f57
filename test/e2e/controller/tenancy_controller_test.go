package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// enforcingController swaps the plane's controller for one started with
// --tenancy-enforced (the TrustPolicy CRD must be served already), and swaps the usual
// one back when the test ends. restart restarts the enforcing one.
func enforcingController(t *testing.T, cp *controlplane.ControlPlane) (restart func()) {
	t.Helper()
	controllers[cp].Stop(10 * time.Second)
	p, err := cp.StartController("--namespace="+controllerNamespace, "--tenancy-enforced")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("enforcing controller log:\n%s", p.Tail())
		}
		p.Stop(10 * time.Second)
		usual, err := cp.StartController("--namespace=" + controllerNamespace)
		if err != nil {
			t.Fatal(err)
		}
		controllers[cp] = usual
	})
	return func() {
		t.Helper()
		if p, err = p.Restart(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

// createPolicy creates a TrustPolicy with spec; it is deleted when the test ends.
func createPolicy(t *testing.T, cp *controlplane.ControlPlane, name string, spec map[string]any) {
	t.Helper()
	policies := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.TrustPolicyResource)
	if _, err := policies.Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": v1alpha1.TrustPolicyKind,
		"metadata": map[string]any{"name": name}, "spec": spec}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = policies.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// policyStatus is the policy's status now.
func policyStatus(t *testing.T, cp *controlplane.ControlPlane, name string) v1alpha1.TrustPolicyStatus {
	t.Helper()
	u, err := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.TrustPolicyResource).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := v1alpha1.TrustPolicyFromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.Status
}

// With tenancy enforced, the controller writes a TrustTarget only into the namespaces
// granted its sources and names the others in its status; fills an annotated
// ConfigMap with its granted sources alone, saying which it left out; keeps every
// TrustPolicy's status (namespaces selected, grants unresolved); and takes away what
// it wrote once the grant is withdrawn.
func TestController_TenancyWritesOnlyWhatANamespaceIsGranted(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	if err := cp.InstallPoliciesCRD(ctx); err != nil {
		t.Fatal(err)
	}
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	granted, other := "ten-a-"+run, "ten-b-"+run
	corpA, corpB := "corp-a-"+run, "corp-b-"+run
	caA, caB := fixtures.CA("tenancy A"), fixtures.CA("tenancy B")
	controlplane.NativeBundle(t, client, corpA, caA)
	controlplane.NativeBundle(t, client, corpB, caB)
	controlplane.LabelledNamespace(t, client, granted, map[string]string{"team": "a-" + run, "tenancy-run": run})
	controlplane.LabelledNamespace(t, client, other, map[string]string{"team": "b-" + run, "tenancy-run": run})
	team := func(name string) map[string]any {
		return map[string]any{"matchLabels": map[string]any{"team": name + "-" + run}}
	}
	createPolicy(t, cp, "team-a-"+run, map[string]any{"namespaceSelector": team("a"), "bundles": []any{map[string]any{"name": corpA}}})
	createPolicy(t, cp, "team-b-"+run, map[string]any{"namespaceSelector": team("b"), "bundles": []any{map[string]any{"name": corpB}, map[string]any{"name": "corp-later-" + run}}})
	restart := enforcingController(t, cp)

	// Every policy's status: how many namespaces it selects, what does not resolve.
	poll.True(t, time.Minute, "team-a's status: one namespace, every grant resolved", func() bool {
		st := policyStatus(t, cp, "team-a-"+run)
		c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
		return st.Namespaces == 1 && c != nil && c.Reason == v1alpha1.ReasonResolved
	})
	poll.True(t, time.Minute, "team-b's status naming the bundle that does not exist", func() bool {
		st := policyStatus(t, cp, "team-b-"+run)
		c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Reason == v1alpha1.ReasonUnresolved && c.Status == metav1.ConditionTrue &&
			slices.Equal(st.Unresolved, []string{"bundles[1]: bundle corp-later-" + run + " does not exist"})
	})

	// A TrustTarget of corp-a selecting both namespaces writes only the granted one.
	target := "tenancy-" + run
	controlplane.CreateTarget(t, cp, target, map[string]any{
		"sources": []any{map[string]any{"name": corpA, "path": "ca.pem"}},
		"target":  map[string]any{"configMap": map[string]any{"name": "tenancy-roots"}, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"tenancy-run": run}}},
	})
	st := controlplane.WaitTargetReason(t, cp, target, v1alpha1.ReasonSynced)
	if st.Namespaces != 1 || st.Synced != 1 || st.NotGranted != 1 || len(st.NotGrantedNamespaces) != 1 || st.NotGrantedNamespaces[0].Namespace != other ||
		!strings.Contains(st.NotGrantedNamespaces[0].Message, fmt.Sprintf("namespace %s may not trust bundle %s: no TrustPolicy grants it; kubectl trustsync grants -n %s", other, corpA, other)) {
		t.Fatalf("status %+v; want %s written and %s named as not granted", st, granted, other)
	}
	if msg := controlplane.ReadyMessage(st); !strings.Contains(msg, "1 more selected are not granted every source") {
		t.Errorf("Ready message %q does not say a namespace was left out", msg)
	}
	holds := func(ns, name, key string, anchors ...*fixtures.Cert) bool {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		got, err := bundle.AnchorIDs([]byte(cm.Data[key]))
		return err == nil && slices.Equal(got, ids(anchors...))
	}
	if !holds(granted, "tenancy-roots", "ca.pem", caA) {
		t.Errorf("the granted namespace %s does not hold corp-a", granted)
	}
	if _, err := client.CoreV1().ConfigMaps(other).Get(ctx, "tenancy-roots", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the namespace not granted corp-a got the target's ConfigMap (err %v)", err)
	}

	// An annotated ConfigMap in the other namespace asking for both bundles gets the
	// one it is granted; the Event names the other.
	sources, _ := json.Marshal([]map[string]string{{"name": corpA, "path": "a.pem"}, {"name": corpB, "path": "b.pem"}})
	if _, err := client.CoreV1().ConfigMaps(other).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-trust",
		Annotations: map[string]string{"trustsync.io/inject": "true", "trustsync.io/sources": string(sources)}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, time.Minute, "the annotated ConfigMap holding its granted bundle", func() bool { return holds(other, "app-trust", "b.pem", caB) })
	waitEventOn(t, client, other, "app-trust", "TrustInjectNotGranted", fmt.Sprintf("left out: not granted to namespace %s: a.pem (namespace %s may not trust bundle %s", other, other, corpA))
	if cm, _ := client.CoreV1().ConfigMaps(other).Get(ctx, "app-trust", metav1.GetOptions{}); cm != nil && cm.Data["a.pem"] != "" {
		t.Errorf("the annotated ConfigMap got the bundle its namespace is not granted")
	}

	// A restarted controller, which must list the grants before it acts, takes
	// nothing away: once it has filled a new object, what it wrote before is intact.
	restart()
	if _, err := client.CoreV1().ConfigMaps(granted).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-restart",
		Annotations: map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": corpA, "trustsync.io/path": "ca.pem"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, time.Minute, "the restarted controller filling a new object", func() bool { return holds(granted, "after-restart", "ca.pem", caA) })
	if !holds(granted, "tenancy-roots", "ca.pem", caA) || !holds(other, "app-trust", "b.pem", caB) {
		t.Error("a restart took away what the namespaces are granted")
	}

	// Withdrawn: team-a's policy goes. The target writes nowhere and takes back what
	// it wrote; team-b's namespace loses nothing it is still granted.
	if err := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.TrustPolicyResource).Delete(ctx, "team-a-"+run, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	st = controlplane.WaitTargetReason(t, cp, target, v1alpha1.ReasonNotGranted)
	if st.NotGranted != 2 || st.Namespaces != 0 {
		t.Errorf("status after the grant was withdrawn %+v; want both namespaces not granted", st)
	}
	poll.True(t, time.Minute, "the withdrawn namespace's ConfigMap without corp-a", func() bool { return !holds(granted, "tenancy-roots", "ca.pem", caA) })
	if !holds(other, "app-trust", "b.pem", caB) {
		t.Error("the other namespace lost the bundle it is still granted")
	}
}
