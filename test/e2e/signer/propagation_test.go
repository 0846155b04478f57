package signer

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/cmd/kubectl-trustsync/plugin"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/poll"
)

// observedSigner runs a signer of its own (its own namespace, Lease and CA) with
// observed propagation and a short maximum wait.
const (
	observedSigner    = "example.com/observed"
	observedNamespace = "observed-signer"
	observedMaxWait   = 20 * time.Second
)

// With observed propagation, a new CA signs once every pod selecting the signer's
// bundle is seen holding it, not before, whatever the time: kubectl trustsync rotation
// names the pods that lack it, a certificate issued meanwhile comes from the old CA,
// and once the last pod holds it the next one comes from the new CA, with a Normal
// Event on the CA Secret. A pod that never catches up holds the rotation back until
// the maximum wait, when it proceeds with a Warning Event naming the pod.
func TestSigner_ObservedRotationWaitsForEveryPodThenForTheMaximumAlone(t *testing.T) {
	cp := planes.Get(t, true)
	startObservedSigner(t, cp, observedNamespace, observedSigner, "--ca-propagation-max-wait="+observedMaxWait.String())
	cli := controlplane.NewPlugin(t, cp)
	// rotation asks kubectl trustsync; its exit code is 3 while pods lack the new CA.
	rotation := func(code int) plugin.Rotation {
		t.Helper()
		var r plugin.Rotation
		cli.JSON(t, &r, code, "rotation", observedSigner)
		return r
	}
	var r plugin.Rotation
	stable := func() bool {
		out, code := cli.Run(t, "rotation", observedSigner, "-o", "json")
		return code == 0 && json.Unmarshal([]byte(out), &r) == nil && r.Phase == "Stable"
	}
	poll.True(t, time.Minute, "the signer's live bundle, Stable", stable)
	oldCA := r.CurrentCA

	// Two pods select the bundle through the kubelet's projection, on two nodes whose
	// reports say what they hold.
	pods := map[string]*corev1.Pod{}
	for _, name := range []string{"holds-soon", "never-holds"} {
		pods[name] = selectingPod(t, cp, appNamespace, name, observedSigner)
	}
	hold := func(name string, anchors ...string) { writeReport(t, cp, pods[name], anchors...) }
	hold("holds-soon", oldCA)
	hold("never-holds", oldCA)

	requestRotation(t, cp, observedNamespace, observedSigner)
	poll.True(t, time.Minute, "a new CA waiting", func() bool { r = rotation(3); return r.Phase == "Waiting" })
	newCA := r.NewCA
	if r.Holding != 0 || r.Expected != 2 || len(r.Stragglers) != 2 {
		t.Errorf("rotation right after the new CA was published: %+v", r)
	}
	if issuer := issuedBy(t, cp); issuer != oldCA {
		t.Errorf("a certificate issued while no pod holds the new CA comes from %s, not the old CA %s", issuer, oldCA)
	}

	hold("holds-soon", oldCA, newCA)
	poll.True(t, time.Minute, "one pod of two holding the new CA", func() bool { r = rotation(3); return r.Holding == 1 })
	if len(r.Stragglers) != 1 || r.Stragglers[0].Pod != "never-holds" || r.Stragglers[0].Reason != "Behind" {
		t.Errorf("stragglers with one pod behind: %+v", r.Stragglers)
	}
	// -n counts and lists one namespace's pods: the app namespace's two, and none in
	// the signer's.
	var inApps plugin.Rotation
	cli.JSON(t, &inApps, 3, "rotation", observedSigner, "-n", appNamespace)
	if inApps.Namespace != appNamespace || inApps.Holding != 1 || inApps.Expected != 2 || len(inApps.Stragglers) != 1 {
		t.Errorf("rotation -n %s: %+v", appNamespace, inApps)
	}
	out, _ := cli.Run(t, "rotation", observedSigner, "-n", observedNamespace, "-o", "json")
	var elsewhere plugin.Rotation
	if err := json.Unmarshal([]byte(out), &elsewhere); err != nil || elsewhere.Namespace != observedNamespace || elsewhere.Expected != 0 || len(elsewhere.Stragglers) != 0 {
		t.Errorf("rotation -n %s counts another namespace's pods (%v): %s", observedNamespace, err, out)
	}
	if issuer := issuedBy(t, cp); issuer != oldCA {
		t.Errorf("a certificate issued while a pod lacks the new CA comes from %s, not the old CA %s", issuer, oldCA)
	}

	hold("never-holds", oldCA, newCA)
	poll.True(t, time.Minute, "the new CA signing once both pods hold it", func() bool { return stable() && r.CurrentCA == newCA })
	if issuer := issuedBy(t, cp); issuer != newCA {
		t.Errorf("a certificate issued once every pod holds the new CA comes from %s, not the new CA %s", issuer, newCA)
	}
	waitEvent(t, cp, observedNamespace, observedSigner, "RotationProceeded", "all 2 pods selecting")

	// A second rotation that one pod never catches up with.
	requestRotation(t, cp, observedNamespace, observedSigner)
	poll.True(t, time.Minute, "a second new CA waiting", func() bool { r = rotation(3); return r.Phase == "Waiting" && r.NewCA != newCA })
	third := r.NewCA
	hold("holds-soon", newCA, third)
	published := time.Now()
	poll.True(t, time.Minute, "the rotation proceeding after its maximum wait", func() bool { return stable() && r.CurrentCA == third })
	if waited := time.Since(published); waited < observedMaxWait/2 {
		t.Errorf("the rotation proceeded %s after the last report, before its maximum wait of %s", waited, observedMaxWait)
	}
	waitEvent(t, cp, observedNamespace, observedSigner, "RotationProceededWithoutAllPods", "apps/never-holds (Behind")
}

// A rotation waits for the ConfigMaps a TrustTarget writes from the signer's bundle,
// as it waits for pods: while another tool's ConfigMap stands where the target writes
// in one of its two namespaces, `rotation` names the target's objects, one of two
// holding the new CA, and the new CA does not sign, though no pod selects the bundle
// and the floor is 0. Once the other tool's ConfigMap goes, the target writes there
// at once, and the new CA signs with an Event counting the objects.
func TestSigner_ARotationWaitsForTheObjectsATrustTargetWrites(t *testing.T) {
	const namespace, signer, target = "objects-signer", "example.com/objects", "signer-roots"
	cp := planes.Get(t, true)
	ctx := context.Background()
	admin := kube(t, cp.AdminConfig())
	startObservedSigner(t, cp, namespace, signer, "--ca-propagation-max-wait=1h", "--ca-propagation-min-wait=0")
	cli := controlplane.NewPlugin(t, cp)
	var r plugin.Rotation
	rotation := signerRotation(t, cli, signer, &r)
	poll.True(t, time.Minute, "the signer's live bundle, Stable", func() bool { return rotation() == 0 && r.Phase == "Stable" })

	label := map[string]string{"objects-test": "signer-roots"}
	controlplane.LabelledNamespace(t, admin, "objects-a", label)
	controlplane.LabelledNamespace(t, admin, "objects-b", label)
	if _, err := admin.CoreV1().ConfigMaps("objects-b").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: target},
		Data: map[string]string{"ca.pem": "another tool's ca.pem"}}, metav1.CreateOptions{FieldManager: "another-tool"}); err != nil {
		t.Fatal(err)
	}
	controlplane.CreateTarget(t, cp, target, map[string]any{
		"sources": []any{map[string]any{"signerName": signer, "path": "ca.pem",
			"labelSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/cluster-trust-bundle-version": "live"}}}},
		"target": map[string]any{"configMap": map[string]any{"name": target}, "namespaceSelector": map[string]any{"matchLabels": label}},
	})
	controlplane.WaitTargetReason(t, cp, target, "WriteFailed")

	requestRotation(t, cp, namespace, signer)
	poll.True(t, time.Minute, "the new CA waiting, written by the target where it can be", func() bool {
		return rotation() == 3 && r.Phase == "Waiting" && len(r.Objects) == 1 && r.Objects[0].Holding == 1
	})
	if o := r.Objects[0]; o.Kind != "ConfigMap" || o.Name != target || o.Writer != "TrustTarget "+target || o.Expected != 2 || !strings.Contains(o.Detail, "objects-b") {
		t.Errorf("the target's objects as rotation names them: %+v; want ConfigMap %s of TrustTarget %s in 1 of 2 namespaces, objects-b named", o, target, target)
	}
	if r.Expected != 0 {
		t.Errorf("%d pods selecting the bundle, want none: only the objects hold the rotation back", r.Expected)
	}
	// The signer saw the same and waits for it: no pod and a floor of 0 would have
	// let it sign.
	waitEvent(t, cp, namespace, signer, "RotationWaiting", "ConfigMap "+target+" of TrustTarget "+target+" in 1 of 2 namespaces")
	if rotation(); r.Phase != "Waiting" {
		t.Fatalf("the new CA signs while the target's ConfigMap in objects-b lacks it: %+v", r)
	}
	newCA := r.NewCA

	if err := admin.CoreV1().ConfigMaps("objects-b").Delete(ctx, target, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, time.Minute, "the new CA signing once both namespaces' ConfigMaps hold it", func() bool { return rotation() == 0 && r.Phase == "Stable" && r.CurrentCA == newCA })
	waitEvent(t, cp, namespace, signer, "RotationProceeded", "and so do the 2 objects TrustTargets write from it")
}

// signerRotation returns what asks `kubectl trustsync rotation SIGNER -o json` into r,
// returning its exit code (-1 when it printed no rotation). Warnings on stderr are not
// part of the answer.
func signerRotation(t *testing.T, cli controlplane.Plugin, signer string, r *plugin.Rotation) func() int {
	return func() int {
		out, _, code := cli.Output(t, "rotation", signer, "-o", "json")
		if err := json.Unmarshal([]byte(out), r); err != nil {
			return -1
		}
		return code
	}
}

// startObservedSigner runs a signer of its own in namespace, with observed
// propagation, until the test ends (its log shown if the test failed).
func startObservedSigner(t testing.TB, cp *controlplane.ControlPlane, namespace, signer string, extra ...string) *controlplane.Process {
	t.Helper()
	if err := cp.CreateNamespace(context.Background(), namespace, nil); err != nil {
		t.Fatal(err)
	}
	p, err := cp.StartSigner(append([]string{"--namespace=" + namespace, "--signer-name=" + signer, "--ca-propagation=observed", "--ca-propagation-window=1h"}, extra...)...)
	return untilTheEnd(t, "signer", p, err)
}

// untilTheEnd fails the test if the process could not start, and otherwise stops it
// when the test ends, showing its log if the test failed.
func untilTheEnd(t testing.TB, name string, p *controlplane.Process, err error) *controlplane.Process {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.Tail())
		}
		p.Stop(10 * time.Second)
	})
	return p
}

// writeReport makes pod's node report that the pod's ca.pem holds anchors.
func writeReport(t *testing.T, cp *controlplane.ControlPlane, pod *corev1.Pod, anchors ...string) {
	t.Helper()
	obj, err := nodeReport(pod.Spec.NodeName, []*corev1.Pod{pod}, anchors...)
	if err != nil {
		t.Fatal(err)
	}
	putReport(t, cp, obj)
}

// putReport creates or replaces a node's report, deleted when the test ends.
func putReport(t *testing.T, cp *controlplane.ControlPlane, obj *unstructured.Unstructured) {
	t.Helper()
	c := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.NodeTrustReportResource)
	if cur, err := c.Get(context.Background(), obj.GetName(), metav1.GetOptions{}); err == nil {
		obj.SetResourceVersion(cur.GetResourceVersion())
		_, err = c.Update(context.Background(), obj, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := c.Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{}) })
}

// nodeReport is node's report, as its agent writes it, that each of pods' ca.pem
// (a projected volume "roots" at /etc/roots) holds anchors.
func nodeReport(node string, pods []*corev1.Pod, anchors ...string) (*unstructured.Unstructured, error) {
	anchors = slices.Sorted(slices.Values(anchors))
	id := v1alpha1.AnchorSetID(anchors)
	r := &v1alpha1.NodeTrustReport{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.NodeTrustReportKind},
		ObjectMeta: metav1.ObjectMeta{Name: node}, Node: node, UpdatedAt: metav1.Now(),
		AnchorSets: []v1alpha1.AnchorSet{{ID: id, Anchors: anchors, Count: len(anchors)}}}
	for _, pod := range pods {
		r.Pods = append(r.Pods, v1alpha1.PodHolding{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID),
			Files: []v1alpha1.FileHolding{{Path: "/etc/roots/ca.pem", Volume: "roots", File: "ca.pem", Delivery: "native", AnchorSet: id}}})
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r)
	return &unstructured.Unstructured{Object: m}, err
}

// requestRotation asks the signer running in namespace to rotate its CA now.
func requestRotation(t testing.TB, cp *controlplane.ControlPlane, namespace, signer string) {
	t.Helper()
	annotateCASecret(t, cp, namespace, signer, "trustsync.io/rotate-requested-at", time.Now().UTC().Format(time.RFC3339Nano))
}

// selectingPod makes a pod of namespace on its own node, selecting signer's bundles
// through the kubelet's projection, and running as a kubelet would say (a pod none
// of whose containers started is not waited for); deleted when the test ends.
func selectingPod(t *testing.T, cp *controlplane.ControlPlane, namespace, name, signer string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	admin := kube(t, cp.AdminConfig())
	pod, err := admin.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: "node-" + name, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1",
			VolumeMounts: []corev1.VolumeMount{{Name: "roots", MountPath: "/etc/roots"}}}},
			Volumes: []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{SignerName: ptr.To(signer), LabelSelector: &metav1.LabelSelector{}, Path: "ca.pem"}}}}}}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "registry.example/app:1",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	if pod, err = admin.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Pods(namespace).Delete(ctx, name, *metav1.NewDeleteOptions(0)) })
	return pod
}

// annotateCASecret sets an annotation on signer's CA Secret, as an operator would.
func annotateCASecret(t testing.TB, cp *controlplane.ControlPlane, namespace, signer, key, value string) {
	t.Helper()
	secrets := kube(t, cp.AdminConfig()).CoreV1().Secrets(namespace)
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := secrets.Get(ctx, caSecret(signer), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		s.Annotations[key] = value
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// issuedBy issues a certificate from the observed signer and returns its issuer's
// anchor ID (the SHA-256 of the CA certificate that signed it, from the live bundle).
func issuedBy(t *testing.T, cp *controlplane.ControlPlane) string {
	t.Helper()
	cert := leaf(t, waitDone(t, cp, requestAs(t, cp, "web", observedSigner, nil, []string{spiffe(appNamespace, "web")}).Name))
	b, err := liveStore(t, cp, true).Get(context.Background(), "example.com:observed:live")
	if err != nil {
		t.Fatal(err)
	}
	certs, err := bundle.ParseCertificates([]byte(b.Spec.TrustBundle))
	if err != nil {
		t.Fatal(err)
	}
	for _, ca := range certs {
		if cert.CheckSignatureFrom(ca) == nil {
			return bundle.AnchorID(ca.Raw)
		}
	}
	t.Fatalf("the certificate verifies against no anchor of the live bundle")
	return ""
}

// caSecret is the name of signer's CA Secret, as the signer names it by default.
func caSecret(signer string) string { return "trustsync-ca-" + strings.ReplaceAll(signer, "/", "-") }

// waitEvent waits for an Event of reason on the CA Secret of signer, running in
// namespace, whose message contains want.
func waitEvent(t *testing.T, cp *controlplane.ControlPlane, namespace, signer, reason, want string) {
	t.Helper()
	poll.Eventually(t, time.Minute, "Event "+reason+" saying "+want, func() (bool, string) {
		events, err := kube(t, cp.AdminConfig()).CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + caSecret(signer)})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range events.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == reason && strings.Contains(e.Message, want) {
				return true, ""
			}
		}
		return false, "the Events: " + strings.Join(seen, " | ")
	})
}

// With tenancy enforced, a rotation does not wait for a pod of a namespace not
// granted the bundle, whatever the pod says it reads (one never sent to the webhook
// may say anything): it is named, not counted. An operator may name known stragglers
// in the CA Secret (trustsync.io/rotation-skip-pods), and the rotation proceeds
// without them at its next check, long before its maximum wait.
func TestSigner_ARotationWaitsNeitherForUngrantedPodsNorForThoseAnOperatorNames(t *testing.T) {
	const namespace, signer, tenant = "skippable-signer", "example.com/skippable", "ungranted-tenant"
	cp := planes.Get(t, true)
	ctx := context.Background()
	grantApps(t, cp, "apps-skippable", "bundles", map[string]any{"signerName": signer})
	if err := cp.CreateNamespace(ctx, tenant, nil); err != nil {
		t.Fatal(err)
	}
	startObservedSigner(t, cp, namespace, signer, "--tenancy-enforced", "--ca-propagation-min-wait=1s")
	cli := controlplane.NewPlugin(t, cp)
	var r plugin.Rotation
	poll.True(t, time.Minute, "the signer's live bundle, Stable", func() bool {
		out, code := cli.Run(t, "rotation", signer, "-o", "json")
		return code == 0 && json.Unmarshal([]byte(out), &r) == nil && r.Phase == "Stable"
	})
	oldCA := r.CurrentCA
	holds, stuck, forged := selectingPod(t, cp, appNamespace, "skippable-holds", signer), selectingPod(t, cp, appNamespace, "skippable-stuck", signer), selectingPod(t, cp, tenant, "forged", signer)
	for _, p := range []*corev1.Pod{holds, stuck, forged} {
		writeReport(t, cp, p, oldCA)
	}
	requestRotation(t, cp, namespace, signer)
	poll.True(t, time.Minute, "a new CA waiting", func() bool { cli.JSON(t, &r, 3, "rotation", signer); return r.Phase == "Waiting" })
	writeReport(t, cp, holds, oldCA, r.NewCA)
	poll.True(t, time.Minute, "the pod that holds it counted", func() bool { cli.JSON(t, &r, 3, "rotation", signer); return r.Holding == 1 })
	if r.Expected != 2 || len(r.Stragglers) != 1 || r.Stragglers[0].Pod != "skippable-stuck" || !slices.Equal(r.NotGranted, []string{tenant + "/forged"}) {
		t.Errorf("rotation: %+v; want 1 of 2 pods of %s, skippable-stuck behind, %s/forged named as not granted", r, appNamespace, tenant)
	}
	annotateCASecret(t, cp, namespace, signer, "trustsync.io/rotation-skip-pods", appNamespace+"/skippable-stuck")
	newCA := r.NewCA
	poll.True(t, time.Minute, "the new CA signing without the stuck pod", func() bool {
		out, code := cli.Run(t, "rotation", signer, "-o", "json")
		return code == 0 && json.Unmarshal([]byte(out), &r) == nil && r.Phase == "Stable" && r.CurrentCA == newCA
	})
}

// The rotation gate reads the nodes' reports through its watch, decoded as they
// arrive: a stale report hides only its own node's pods, which the waiting rotation
// names as not observed and why, while a fresh report's pod is named behind.
func TestSigner_ARotationNamesAStaleReportsPodsNotObservedAndTheRestAsReported(t *testing.T) {
	const namespace, signer = "stale-signer", "example.com/stale"
	cp := planes.Get(t, true)
	startObservedSigner(t, cp, namespace, signer, "--ca-propagation-max-wait=1h")
	waitForBundle(t, cp, "example.com:stale:live")
	b, err := liveStore(t, cp, true).Get(context.Background(), "example.com:stale:live")
	if err != nil {
		t.Fatal(err)
	}
	certs, err := bundle.ParseCertificates([]byte(b.Spec.TrustBundle))
	if err != nil || len(certs) != 1 {
		t.Fatalf("the live bundle holds %d CAs (%v), want the one", len(certs), err)
	}
	oldCA := bundle.AnchorID(certs[0].Raw)

	fresh := selectingPod(t, cp, appNamespace, "stale-fresh", signer)
	writeReport(t, cp, fresh, oldCA)
	old := selectingPod(t, cp, appNamespace, "stale-old", signer)
	report, err := nodeReport(old.Spec.NodeName, []*corev1.Pod{old}, oldCA)
	if err != nil {
		t.Fatal(err)
	}
	report.Object["updatedAt"] = time.Now().Add(-24 * time.Hour).UTC().Format(time.RFC3339)
	putReport(t, cp, report)

	requestRotation(t, cp, namespace, signer)
	waitEvent(t, cp, namespace, signer, "RotationWaiting", appNamespace+"/stale-fresh (Behind")
	waitEvent(t, cp, namespace, signer, "RotationWaiting", appNamespace+"/stale-old (NotObserved: /etc/roots/ca.pem: report of node "+old.Spec.NodeName+" is stale")
}
