package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"

	"github.com/trustsync/trustsync/bundle/truststore"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// ids are the anchors' IDs, sorted, as a trust file's are.
func ids(anchors ...*fixtures.Cert) []string {
	var out []string
	for _, a := range anchors {
		out = append(out, bundle.AnchorID(a.Cert.Raw))
	}
	slices.Sort(out)
	return out
}

// A TrustTarget fills the ConfigMap in each of 50 selected namespaces, as PEM, PKCS#12
// and JKS, and keeps it current: a bundle edit reaches all 50; a new namespace with the
// label gets it, a relabelled one loses it (deleted where the target made it; only its
// keys taken out where another tool's key shares the ConfigMap); that other key
// survives every update; deleting the target takes its keys away.
func TestTargets_FillEverySelectedNamespaceAndFollowEveryChange(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	rootA, rootB := fixtures.CA("targets A"), fixtures.CA("targets B")
	controlplane.NativeBundle(t, client, "targets-corp", rootA)
	run := fmt.Sprint(time.Now().Unix() % 100000)
	ns := func(i int) string { return fmt.Sprintf("tt-%s-%02d", run, i) }
	for i := range 50 {
		controlplane.LabelledNamespace(t, client, ns(i), map[string]string{"trust": "corp-" + run})
	}
	controlplane.LabelledNamespace(t, client, ns(99), nil)
	// Another tool's key in the first namespace's ConfigMap, written before the target.
	if _, err := client.CoreV1().ConfigMaps(ns(0)).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "corp-roots"},
		Data: map[string]string{"other.txt": "another tool's"}}, metav1.CreateOptions{FieldManager: "another-tool"}); err != nil {
		t.Fatal(err)
	}

	controlplane.CreateTarget(t, cp, "corp-"+run, map[string]any{
		"sources": []any{
			map[string]any{"name": "targets-corp", "path": "ca.crt"},
			map[string]any{"name": "targets-corp", "path": "truststore.p12", "format": "pkcs12"},
			map[string]any{"name": "targets-corp", "path": "truststore.jks", "format": "jks"},
		},
		"target": map[string]any{"configMap": map[string]any{"name": "corp-roots"}, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"trust": "corp-" + run}}},
	})
	var lastSeen string
	holds := func(namespace string, anchors ...*fixtures.Cert) bool {
		cm, err := client.CoreV1().ConfigMaps(namespace).Get(ctx, "corp-roots", metav1.GetOptions{})
		if err != nil {
			lastSeen = namespace + ": " + err.Error()
			return false
		}
		p12, errP := truststore.DecodePKCS12(cm.BinaryData["truststore.p12"], "changeit")
		jks, errJ := truststore.DecodeJKS(cm.BinaryData["truststore.jks"], "changeit")
		pem, errC := bundle.AnchorIDs([]byte(cm.Data["ca.crt"]))
		lastSeen = fmt.Sprintf("%s: ca.crt %d anchors %v, p12 %d anchors %v, jks %d anchors %v", namespace, len(pem), errC, len(p12), errP, len(jks), errJ)
		return slices.Equal(pem, ids(anchors...)) && errP == nil && len(p12) == len(anchors) && errJ == nil && len(jks) == len(anchors)
	}
	waitAllNamespaces := func(what string, anchors ...*fixtures.Cert) time.Duration {
		t.Helper()
		start := time.Now()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			for i := range 50 {
				if !holds(ns(i), anchors...) {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("not every selected namespace holds %s; %s; status %+v", what, lastSeen, controlplane.TargetStatus(t, cp, "corp-"+run))
		}
		return time.Since(start)
	}
	waitAllNamespaces("A", rootA)
	st := controlplane.WaitTargetReason(t, cp, "corp-"+run, "Synced")
	if st.Namespaces < 50 || st.Synced != st.Namespaces {
		t.Errorf("status after filling 50 namespaces: %+v", st)
	}
	// A cluster-scoped object's Events are in namespace default.
	waitEventOn(t, client, "default", "corp-"+run, "Synced", "holds the current anchors in 50 of 50 selected namespaces")
	if _, err := client.CoreV1().ConfigMaps(ns(99)).Get(ctx, "corp-roots", metav1.GetOptions{}); err == nil {
		t.Error("a namespace without the label got the ConfigMap")
	}

	edited := time.Now()
	controlplane.SetNativeBundle(t, client, "targets-corp", rootA, rootB)
	waitAllNamespaces("A and B", rootA, rootB)
	t.Logf("the edit reached all 50 namespaces %.2fs after the update call began (polling included)", time.Since(edited).Seconds())

	controlplane.LabelledNamespace(t, client, ns(50), map[string]string{"trust": "corp-" + run})
	poll.True(t, time.Minute, "the new namespace filled", func() bool { return holds(ns(50), rootA, rootB) })

	relabel := func(name string) {
		n, err := client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Labels["trust"] = "other"
		if _, err := client.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	relabel(ns(1))
	relabel(ns(0))
	poll.True(t, time.Minute, "the relabelled namespace's ConfigMap gone", func() bool {
		_, err := client.CoreV1().ConfigMaps(ns(1)).Get(ctx, "corp-roots", metav1.GetOptions{})
		return err != nil
	})
	poll.True(t, time.Minute, "the shared ConfigMap left with the other tool's key alone", func() bool {
		cm, err := client.CoreV1().ConfigMaps(ns(0)).Get(ctx, "corp-roots", metav1.GetOptions{})
		return err == nil && len(cm.Data) == 1 && cm.Data["other.txt"] == "another tool's" && len(cm.BinaryData) == 0 && cm.Labels[v1alpha1.TargetLabel] == ""
	})
}

// What a target cannot do is said in its Ready condition and an Event, and costs
// nothing already written: a key another tool owns is not taken; a bundle that
// disappears leaves the last good content; a Secret target where the chart has not
// allowed Secrets, a ConfigMap source, a selector that matches nothing.
func TestTargets_RefuseWhatTheyCannotDoAndLoseNothing(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	run := fmt.Sprint(time.Now().Unix() % 100000)
	root := fixtures.CA("targets refuse")
	controlplane.NativeBundle(t, client, "targets-refuse-"+run, root)
	owned := "tt-owned-" + run
	controlplane.LabelledNamespace(t, client, owned, map[string]string{"trust": "refuse-" + run})
	if _, err := client.CoreV1().ConfigMaps(owned).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "roots"},
		Data: map[string]string{"ca.crt": "another tool's ca.crt"}}, metav1.CreateOptions{FieldManager: "another-tool"}); err != nil {
		t.Fatal(err)
	}
	controlplane.CreateTarget(t, cp, "owned-"+run, map[string]any{
		"sources": []any{map[string]any{"name": "targets-refuse-" + run, "path": "ca.crt"}},
		"target":  map[string]any{"configMap": map[string]any{"name": "roots"}, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"trust": "refuse-" + run}}},
	})
	st := controlplane.WaitTargetReason(t, cp, "owned-"+run, "WriteFailed")
	if !strings.Contains(controlplane.ReadyMessage(st), "another manager owns a field") || !strings.Contains(controlplane.ReadyMessage(st), "another-tool") {
		t.Errorf("the conflict is not named: %q", controlplane.ReadyMessage(st))
	}
	if cm, _ := client.CoreV1().ConfigMaps(owned).Get(ctx, "roots", metav1.GetOptions{}); cm.Data["ca.crt"] != "another tool's ca.crt" {
		t.Errorf("the other tool's key was overwritten: %q", cm.Data["ca.crt"])
	}

	// A source that disappears: the last good content stays.
	kept := "tt-kept-" + run
	controlplane.LabelledNamespace(t, client, kept, map[string]string{"trust": "kept-" + run})
	controlplane.CreateTarget(t, cp, "kept-"+run, map[string]any{
		"sources": []any{map[string]any{"name": "targets-refuse-" + run, "path": "ca.crt"}},
		"target":  map[string]any{"configMap": map[string]any{"name": "roots"}, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"trust": "kept-" + run}}},
	})
	controlplane.WaitTargetReason(t, cp, "kept-"+run, "Synced")
	if err := client.CertificatesV1().ClusterTrustBundles().Delete(ctx, "targets-refuse-"+run, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	st = controlplane.WaitTargetReason(t, cp, "kept-"+run, "SourceMissing")
	if !strings.Contains(controlplane.ReadyMessage(st), "targets-refuse-"+run) {
		t.Errorf("the missing bundle is not named: %q", controlplane.ReadyMessage(st))
	}
	if cm, err := client.CoreV1().ConfigMaps(kept).Get(ctx, "roots", metav1.GetOptions{}); err != nil || cm.Data["ca.crt"] != string(root.CertPEM()) {
		t.Errorf("the last good content was lost when its bundle went: %v, %q", err, cm.Data["ca.crt"])
	}

	// What the schema can say, the API server refuses at once, in the controller's words.
	for _, tc := range []struct{ name, want string }{
		{"configMap", "a ConfigMap or Secret source belongs to one namespace"},
		{"passwordSecret", `use the default password "changeit"`},
	} {
		src := map[string]any{"name": "targets-refuse-" + run, "path": "t.jks", "format": "jks"}
		src[tc.name] = map[string]any{"name": "x", "key": "k"}
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "trustsync.io/v1alpha1", "kind": v1alpha1.TrustTargetKind, "metadata": map[string]any{"name": "refused-" + run},
			"spec": map[string]any{"sources": []any{src}, "target": map[string]any{"configMap": map[string]any{"name": "roots"}}}}}
		_, err := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.TrustTargetResource).Create(ctx, obj, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("a target with a %s source: %v; want it refused saying %q", tc.name, err, tc.want)
		}
	}

	for _, tc := range []struct {
		name, reason, want string
		spec               map[string]any
	}{
		{name: "secret", reason: "SecretsNotAllowed", want: "targets.secrets: true", spec: map[string]any{
			"sources": []any{map[string]any{"defaultCAs": true, "path": "ca.crt"}}, "target": map[string]any{"secret": map[string]any{"name": "roots"}}}},
		{name: "nested-path", reason: "InvalidSpec", want: "must be a ConfigMap or Secret key", spec: map[string]any{
			"sources": []any{map[string]any{"defaultCAs": true, "path": "certs/ca.crt"}}, "target": map[string]any{"configMap": map[string]any{"name": "roots"}}}},
		{name: "no-namespace", reason: "NoNamespaces", want: "matches no namespace", spec: map[string]any{
			"sources": []any{map[string]any{"defaultCAs": true, "path": "ca.crt"}},
			"target":  map[string]any{"configMap": map[string]any{"name": "roots"}, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"nothing": "matches"}}}}},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			controlplane.CreateTarget(t, cp, tc.name+"-"+run, tc.spec)
			if st := controlplane.WaitTargetReason(t, cp, tc.name+"-"+run, tc.reason); !strings.Contains(controlplane.ReadyMessage(st), tc.want) {
				t.Errorf("Ready says %q; want it to say %q", controlplane.ReadyMessage(st), tc.want)
			}
		})
	}
}
