package controller

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// restartController stops the shared controller and starts it again alike, as a
// rollout or a leader change does, and waits until its TrustTarget controller runs.
func restartController(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	p, err := controllers[cp].Restart(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	controllers[cp] = p
	poll.True(t, time.Minute, "the restarted controller's TrustTarget controller running", func() bool {
		return strings.Contains(p.Tail(), "TrustTarget controller running")
	})
}

// A source that fails keeps its key's last good content, also across a restart of
// the controller: after a restart there is no earlier rendering, and the object
// itself is read back rather than the key dropped. The same holds for an annotated
// ConfigMap.
func TestTargets_ARestartWhileASourceIsMissingKeepsItsKey(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	one, two, oneNext := fixtures.CA("restart one"), fixtures.CA("restart two"), fixtures.CA("restart one, next")
	controlplane.NativeBundle(t, client, "restart-one-"+run, one)
	controlplane.NativeBundle(t, client, "restart-two-"+run, two)
	ns := "restart-" + run
	controlplane.LabelledNamespace(t, client, ns, map[string]string{"trust": "restart-" + run})
	controlplane.CreateTarget(t, cp, "restart-"+run, map[string]any{
		"sources": []any{map[string]any{"name": "restart-one-" + run, "path": "one.crt"}, map[string]any{"name": "restart-two-" + run, "path": "two.crt"}},
		"target":  map[string]any{"configMap": map[string]any{"name": "roots"}, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"trust": "restart-" + run}}},
	})
	sources := fmt.Sprintf(`[{"name":"restart-one-%s","path":"one.crt"},{"name":"restart-two-%s","path":"two.crt"}]`, run, run)
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "annotated",
		Annotations: map[string]string{"trustsync.io/inject": "true", "trustsync.io/sources": sources}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"roots", "annotated"} {
		poll.True(t, time.Minute, name+" holding both keys", func() bool {
			a, _ := controlplane.ConfigMapKey(t, client, ns, name, "one.crt")
			b, _ := controlplane.ConfigMapKey(t, client, ns, name, "two.crt")
			return a == string(one.CertPEM()) && b == string(two.CertPEM())
		})
	}
	if err := client.CertificatesV1().ClusterTrustBundles().Delete(ctx, "restart-two-"+run, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	controlplane.WaitTargetReason(t, cp, "restart-"+run, "SourceMissing")

	restartController(t, cp)
	// An edit of the other source is reconciled by the new process: once it is
	// written, the reconcile that could have dropped two.crt has run.
	controlplane.SetNativeBundle(t, client, "restart-one-"+run, oneNext)
	for _, name := range []string{"roots", "annotated"} {
		poll.True(t, time.Minute, name+" holding the edited one.crt", func() bool {
			a, _ := controlplane.ConfigMapKey(t, client, ns, name, "one.crt")
			return a == string(oneNext.CertPEM())
		})
		if b, ok := controlplane.ConfigMapKey(t, client, ns, name, "two.crt"); !ok || b != string(two.CertPEM()) {
			t.Errorf("%s lost two.crt's last good content across the restart: has=%v %q", name, ok, b)
		}
	}
	st := controlplane.WaitTargetReason(t, cp, "restart-"+run, "SourceMissing")
	if !strings.Contains(controlplane.ReadyMessage(st), "kept the last good content of: two.crt") {
		t.Errorf("Ready does not say two.crt was kept: %q", controlplane.ReadyMessage(st))
	}
}

// configMapHistory records every version of a ConfigMap until the test ends.
type configMapHistory struct {
	mu       sync.Mutex
	versions []*corev1.ConfigMap
	deleted  int
}

func watchConfigMap(t *testing.T, client kubernetes.Interface, namespace, name string) *configMapHistory {
	t.Helper()
	w, err := client.CoreV1().ConfigMaps(namespace).Watch(context.Background(), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	h := &configMapHistory{}
	go func() {
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok {
				continue
			}
			h.mu.Lock()
			if ev.Type == watch.Deleted {
				h.deleted++
			} else {
				h.versions = append(h.versions, cm)
			}
			h.mu.Unlock()
		}
	}()
	t.Cleanup(w.Stop)
	return h
}

// anyVersion reports whether a recorded version satisfies ok, and how many were deleted.
func (h *configMapHistory) anyVersion(ok func(*corev1.ConfigMap) bool) (bool, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cm := range h.versions {
		if ok(cm) {
			return true, h.deleted
		}
	}
	return false, h.deleted
}

// Two TrustTargets naming one ConfigMap: the first claimant writes it, the other
// writes nothing there, both say so naming the other, and they never take turns.
// Deleting the writer hands the ConfigMap to the other whole: never deleted, never
// without a writer's keys. A target naming an annotated ConfigMap leaves it to its
// annotations, and an annotated ConfigMap a target writes is left to the target.
func TestTargets_TwoClaimsOnOneObjectNeverAlternateAndDeleteNothing(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	root, next := fixtures.CA("claims"), fixtures.CA("claims next")
	controlplane.NativeBundle(t, client, "claims-"+run, root)
	ns := "claims-" + run
	controlplane.LabelledNamespace(t, client, ns, map[string]string{"trust": "claims-" + run})
	history := watchConfigMap(t, client, ns, "shared")
	target := func(name, key, object string) {
		controlplane.CreateTarget(t, cp, name, map[string]any{
			"sources": []any{map[string]any{"name": "claims-" + run, "path": key}},
			"target":  map[string]any{"configMap": map[string]any{"name": object}, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"trust": "claims-" + run}}},
		})
	}
	first, second := "claims-first-"+run, "claims-second-"+run
	target(first, "first.crt", "shared")
	controlplane.WaitTargetReason(t, cp, first, "Synced")
	target(second, "second.crt", "shared")
	if st := controlplane.WaitTargetReason(t, cp, second, "Conflict"); !strings.Contains(controlplane.ReadyMessage(st), "written by TrustTarget "+first) {
		t.Errorf("the second claimant does not name the writer: %q", controlplane.ReadyMessage(st))
	}
	if st := controlplane.WaitTargetReason(t, cp, first, "Conflict"); !strings.Contains(controlplane.ReadyMessage(st), "TrustTarget "+second+" also names ConfigMap "+ns+"/shared") {
		t.Errorf("the writer does not name the other claimant: %q", controlplane.ReadyMessage(st))
	}
	controlplane.SetNativeBundle(t, client, "claims-"+run, root, next)
	poll.True(t, time.Minute, "the writer's key following the edit", func() bool {
		v, _ := controlplane.ConfigMapKey(t, client, ns, "shared", "first.crt")
		return v == string(root.CertPEM())+string(next.CertPEM()) || strings.Count(v, "BEGIN CERTIFICATE") == 2
	})
	if took, _ := history.anyVersion(func(cm *corev1.ConfigMap) bool {
		_, has := cm.Data["second.crt"]
		return has || cm.Labels[v1alpha1.TargetLabel] != first
	}); took {
		t.Error("the second claimant wrote into the ConfigMap the first writes")
	}

	// The writer goes: the other takes the object over, without a gap.
	if err := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.TrustTargetResource).Delete(ctx, first, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, time.Minute, "the second claimant writing the ConfigMap", func() bool {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "shared", metav1.GetOptions{})
		_, firstKey := cm.Data["first.crt"]
		return err == nil && cm.Labels[v1alpha1.TargetLabel] == second && cm.Data["second.crt"] != "" && !firstKey
	})
	controlplane.WaitTargetReason(t, cp, second, "Synced")
	if _, deleted := history.anyVersion(func(*corev1.ConfigMap) bool { return false }); deleted > 0 {
		t.Errorf("the ConfigMap another target still claimed was deleted %d times", deleted)
	}

	// An annotated ConfigMap is its annotations' to fill.
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "annotated", Annotations: map[string]string{
		"trustsync.io/inject": "true", "trustsync.io/bundle-name": "claims-" + run, "trustsync.io/path": "annotated.crt"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, time.Minute, "the annotated ConfigMap filled", func() bool {
		v, _ := controlplane.ConfigMapKey(t, client, ns, "annotated", "annotated.crt")
		return v != ""
	})
	target("claims-third-"+run, "third.crt", "annotated")
	if st := controlplane.WaitTargetReason(t, cp, "claims-third-"+run, "Conflict"); !strings.Contains(controlplane.ReadyMessage(st), "annotated trustsync.io/inject") {
		t.Errorf("the target does not say the object is the annotation's: %q", controlplane.ReadyMessage(st))
	}
	if _, has := controlplane.ConfigMapKey(t, client, ns, "annotated", "third.crt"); has {
		t.Error("the target wrote into an annotated ConfigMap")
	}
	// And the annotation on a target's ConfigMap is refused on the object.
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "shared", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Annotations = map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "claims-" + run, "trustsync.io/path": "injected.crt"}
	if _, err := client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEventOn(t, client, ns, "shared", "TrustInjectConflict", "TrustTarget "+second+" writes this ConfigMap")
	if st := controlplane.WaitTargetReason(t, cp, second, "Conflict"); !strings.Contains(controlplane.ReadyMessage(st), "also annotated trustsync.io/inject") {
		t.Errorf("the target does not say its object is annotated too: %q", controlplane.ReadyMessage(st))
	}
	if _, has := controlplane.ConfigMapKey(t, client, ns, "shared", "injected.crt"); has {
		t.Error("the annotation was acted on in a ConfigMap a target writes")
	}
}

// A ConfigMap a user made, written into by a target, is never deleted: when its
// namespace stops matching, only the target's keys, label and marker go. One the
// target made goes whole.
func TestTargets_DeleteOnlyWhatTheyCreated(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	root := fixtures.CA("created")
	controlplane.NativeBundle(t, client, "created-"+run, root)
	users, made := "created-users-"+run, "created-made-"+run
	controlplane.LabelledNamespace(t, client, users, map[string]string{"trust": "created-" + run})
	controlplane.LabelledNamespace(t, client, made, map[string]string{"trust": "created-" + run})
	if _, err := client.CoreV1().ConfigMaps(users).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "roots"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	controlplane.CreateTarget(t, cp, "created-"+run, map[string]any{
		"sources": []any{map[string]any{"name": "created-" + run, "path": "ca.crt"}},
		"target":  map[string]any{"configMap": map[string]any{"name": "roots"}, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"trust": "created-" + run}}},
	})
	for _, ns := range []string{users, made} {
		poll.True(t, time.Minute, ns+" filled", func() bool { v, _ := controlplane.ConfigMapKey(t, client, ns, "roots", "ca.crt"); return v != "" })
	}
	if cm, _ := client.CoreV1().ConfigMaps(made).Get(ctx, "roots", metav1.GetOptions{}); cm.Annotations[v1alpha1.CreatedAnnotation] != "true" {
		t.Errorf("the ConfigMap the target made is not marked so: %v", cm.Annotations)
	}
	if cm, _ := client.CoreV1().ConfigMaps(users).Get(ctx, "roots", metav1.GetOptions{}); cm.Annotations[v1alpha1.CreatedAnnotation] != "" {
		t.Errorf("the user's ConfigMap is marked as the target's: %v", cm.Annotations)
	}
	for _, ns := range []string{users, made} {
		n, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Labels["trust"] = "none"
		if _, err := client.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll.True(t, time.Minute, "the target's own ConfigMap deleted", func() bool {
		_, err := client.CoreV1().ConfigMaps(made).Get(ctx, "roots", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	poll.True(t, time.Minute, "the user's ConfigMap emptied of the target's key and label", func() bool {
		cm, err := client.CoreV1().ConfigMaps(users).Get(ctx, "roots", metav1.GetOptions{})
		return err == nil && len(cm.Data) == 0 && cm.Labels[v1alpha1.TargetLabel] == ""
	})
}

// A name that cannot label what the target writes is refused when created.
func TestTargets_ANameLongerThanALabelValueIsRefused(t *testing.T) {
	cp := planes.Get(t, true)
	c := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.TrustTargetResource)
	for _, tc := range []struct {
		name    string
		refused bool
	}{
		{name: strings.Repeat("a", 63)},
		{name: strings.Repeat("b", 64), refused: true},
	} {
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "trustsync.io/v1alpha1", "kind": v1alpha1.TrustTargetKind, "metadata": map[string]any{"name": tc.name},
			"spec": map[string]any{"sources": []any{map[string]any{"defaultCAs": true, "path": "ca.crt"}}, "target": map[string]any{"configMap": map[string]any{"name": "x"},
				"namespaceSelector": map[string]any{"matchLabels": map[string]any{"nothing": "matches"}}}}}}
		_, err := c.Create(context.Background(), obj, metav1.CreateOptions{})
		if err == nil {
			_ = c.Delete(context.Background(), tc.name, metav1.DeleteOptions{})
		}
		switch {
		case tc.refused && (err == nil || !strings.Contains(err.Error(), "at most 63 characters")):
			t.Errorf("a %d-character name: got %v; want it refused saying at most 63 characters", len(tc.name), err)
		case !tc.refused && err != nil:
			t.Errorf("a %d-character name was refused: %v", len(tc.name), err)
		}
	}
}

// targetWrites is what the TrustTarget controller sent and reconciled.
func targetWrites(t testing.TB, p *controlplane.Process) (writes, reconciles float64) {
	t.Helper()
	metrics, err := p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(metrics, "\n") {
		value := func() float64 {
			f, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			return f
		}
		switch {
		case strings.HasPrefix(line, `trustsync_targets_writes_total{controller="targets"`):
			writes += value()
		case strings.HasPrefix(line, `trustsync_targets_reconciles_total{controller="targets"}`):
			reconciles += value()
		}
	}
	return writes, reconciles
}

// reconcileAll waits until the controller has reconciled n targets once more after
// whatever came before (a label no target selects, set on namespace, enqueues them
// all), and returns the writes it has sent by then: complete, with no sleep.
// quietReconciles is the controller's count of TrustTarget reconciles once it has
// stayed the same for two seconds: what an event cost, echoes included, has been
// counted.
func quietReconciles(t testing.TB, p *controlplane.Process) float64 {
	t.Helper()
	_, last := targetWrites(t, p)
	for still := 0; still < 2; {
		time.Sleep(time.Second)
		_, now := targetWrites(t, p)
		if now == last {
			still++
		} else {
			still, last = 0, now
		}
	}
	return last
}

func reconcileAll(t testing.TB, cp *controlplane.ControlPlane, namespace string, n int) float64 {
	t.Helper()
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	_, before := targetWrites(t, controllers[cp])
	ns, err := client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels["poke"] = strconv.FormatInt(time.Now().UnixNano(), 10)
	if _, err := client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, time.Minute, "every target reconciled again", func() bool { _, r := targetWrites(t, controllers[cp]); return r >= before+float64(n) })
	w, _ := targetWrites(t, controllers[cp])
	return w
}

// Writes grow with what changed, not with targets times namespaces: a new namespace
// costs one write and one reconcile per target selecting it (the controller's own
// writes coming back reconcile nothing), an edit one write per object it changes,
// and a reconcile with nothing to change none.
func TestTargets_WritesFollowWhatChanged(t *testing.T) {
	cp := planes.Get(t, true)
	client := kube(t, cp.AdminConfig())
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	const nTargets, nNamespaces = 3, 12
	root, next := fixtures.CA("writes"), fixtures.CA("writes next")
	for i := range nTargets {
		controlplane.NativeBundle(t, client, fmt.Sprintf("writes-%s-%d", run, i), root)
	}
	label := map[string]string{"trust": "writes-" + run}
	for i := range nNamespaces {
		controlplane.LabelledNamespace(t, client, fmt.Sprintf("writes-%s-%02d", run, i), label)
	}
	for i := range nTargets {
		controlplane.CreateTarget(t, cp, fmt.Sprintf("writes-%s-%d", run, i), map[string]any{
			"sources": []any{map[string]any{"name": fmt.Sprintf("writes-%s-%d", run, i), "path": "ca.crt"}},
			"target":  map[string]any{"configMap": map[string]any{"name": fmt.Sprintf("roots-%d", i)}, "namespaceSelector": map[string]any{"matchLabels": label}},
		})
	}
	synced := func(namespaces int) func() bool {
		return func() bool {
			for i := range nTargets {
				st := controlplane.TargetStatus(t, cp, fmt.Sprintf("writes-%s-%d", run, i))
				if st.Namespaces != namespaces || st.Synced != namespaces {
					return false
				}
			}
			return true
		}
	}
	poll.True(t, time.Minute, "every target synced", synced(nNamespaces))
	settled := func() float64 { return reconcileAll(t, cp, fmt.Sprintf("writes-%s-00", run), nTargets) }
	idle := settled()
	if again := settled(); again != idle {
		t.Errorf("reconciling targets with nothing to change sent %v writes; want 0", again-idle)
	}

	quiet := func() float64 { return quietReconciles(t, controllers[cp]) }
	reconciled := quiet()
	controlplane.LabelledNamespace(t, client, fmt.Sprintf("writes-%s-new", run), label)
	poll.True(t, time.Minute, "the new namespace filled", synced(nNamespaces+1))
	if got := quiet() - reconciled; got != nTargets {
		t.Errorf("a new namespace cost %v reconciles; want %d, one per target selecting it", got, nTargets)
	}
	afterNamespace := settled()
	if got := afterNamespace - idle; got != nTargets {
		t.Errorf("a new namespace cost %v writes; want %d, one per target selecting it", got, nTargets)
	}

	controlplane.SetNativeBundle(t, client, fmt.Sprintf("writes-%s-0", run), root, next)
	poll.True(t, time.Minute, "the edit written in every namespace", func() bool {
		for i := range nNamespaces {
			if v, _ := controlplane.ConfigMapKey(t, client, fmt.Sprintf("writes-%s-%02d", run, i), "roots-0", "ca.crt"); strings.Count(v, "BEGIN CERTIFICATE") != 2 {
				return false
			}
		}
		return true
	})
	afterEdit := settled()
	if got := afterEdit - afterNamespace; got != nNamespaces+1 {
		t.Errorf("an edit of one target's bundle cost %v writes; want %d, one per object it changes", got, nNamespaces+1)
	}

	// A namespace going away costs nothing: the namespace controller deletes what is
	// in it, so releasing each object first would be two writes for nothing.
	if err := client.CoreV1().Namespaces().Delete(context.Background(), fmt.Sprintf("writes-%s-new", run), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, time.Minute, "the going namespace no longer counted", func() bool {
		for i := range nTargets {
			if controlplane.TargetStatus(t, cp, fmt.Sprintf("writes-%s-%d", run, i)).Namespaces != nNamespaces {
				return false
			}
		}
		return true
	})
	if got := settled() - afterEdit; got != 0 {
		t.Errorf("a namespace going away cost %v writes; want 0", got)
	}
}
