package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/trustreport/query"
)

// putReport writes a report as given (the admin may write any node's), deleted when
// the test ends; it returns the API server's error.
func putReport(t *testing.T, cp *controlplane.ControlPlane, obj map[string]any) error {
	t.Helper()
	c := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.NodeTrustReportResource)
	obj["apiVersion"], obj["kind"] = v1alpha1.GroupVersion.String(), v1alpha1.NodeTrustReportKind
	u := &unstructured.Unstructured{Object: obj}
	_, err := c.Create(context.Background(), u, metav1.CreateOptions{})
	if err == nil {
		t.Cleanup(func() { _ = c.Delete(context.Background(), u.GetName(), metav1.DeleteOptions{}) })
	}
	return err
}

// readersPod is a pod on node reading bundle through a projected volume at
// /etc/roots/<path>, running (its container started) or not.
func readersPod(t *testing.T, cp *controlplane.ControlPlane, ns, name, node, bundleName, path string, running bool) *corev1.Pod {
	t.Helper()
	pod := createPod(t, cp, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "default",
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1", VolumeMounts: []corev1.VolumeMount{{Name: "roots", MountPath: "/etc/roots"}}}},
			Volumes: []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To(bundleName), Path: path}}}}}}}}})
	if running {
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "registry.example/app:1",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
		var err error
		if pod, err = kube(t, cp).CoreV1().Pods(ns).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return pod
}

// The readers of reports stay truthful under bad reports: the schema refuses what
// they cannot parse; a report still unusable is skipped and named and its node's pods
// count as not observed while everything else is answered; a report speaks for its
// own node's pods alone; "nobody holds it" is said only when every running pod with
// trust files was seen; a pod that never started holds no rotation back; and what
// a report says reaches a terminal escaped.
func TestReaders_StayTruthfulWithBadReports(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	ns := "readers-" + run
	must(t, cp.CreateNamespace(ctx, ns, nil))
	t.Cleanup(func() { _ = kube(t, cp).CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	must(t, cp.CreateServiceAccount(ctx, ns, "default"))
	held, nobody := fixtures.CA("readers held"), fixtures.CA("readers nobody")
	heldID, nobodyID := bundle.AnchorID(held.Cert.Raw), bundle.AnchorID(nobody.Cert.Raw)
	bundleName := newBundle(t, cp, held)
	nodeA, nodeB, nodeC, nodeD := "readers-a-"+run, "readers-b-"+run, "readers-c-"+run, "readers-d-"+run

	seen := readersPod(t, cp, ns, "seen", nodeA, bundleName, "roots.pem", true)
	onB := readersPod(t, cp, ns, "on-b", nodeB, bundleName, "roots.pem", true)
	readersPod(t, cp, ns, "on-c", nodeC, bundleName, "roots.pem", true)
	onD := readersPod(t, cp, ns, "on-d", nodeD, bundleName, "roots.pem", true)
	readersPod(t, cp, ns, "pending", nodeA, bundleName, "roots.pem", false)

	// The schema refuses what readers cannot parse.
	now := time.Now().UTC()
	set := v1alpha1.AnchorSetID([]string{heldID})
	for _, tc := range []struct {
		name, want string
		mutate     func(file, anchorSet map[string]any)
	}{
		{name: "a changedAt without microseconds", want: "changedAt", mutate: func(f, _ map[string]any) { f["changedAt"] = now.Format(time.RFC3339) }},
		{name: "a short anchor id", want: "anchors", mutate: func(_, s map[string]any) { s["anchors"] = []any{"abc"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := map[string]any{"path": "/etc/roots/roots.pem", "volume": "roots", "file": "roots.pem", "delivery": "native", "anchorSet": set,
				"changedAt": now.Format("2006-01-02T15:04:05.000000Z07:00")}
			anchorSet := map[string]any{"id": set, "anchors": []any{heldID}, "count": 1}
			tc.mutate(file, anchorSet)
			err := putReport(t, cp, map[string]any{"metadata": map[string]any{"name": "readers-refused-" + run}, "node": "readers-refused-" + run,
				"updatedAt": now.Format(time.RFC3339), "anchorSets": []any{anchorSet},
				"pods": []any{map[string]any{"namespace": ns, "name": "seen", "uid": string(seen.UID), "files": []any{file}}}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("a report with %s: got %v; want it refused naming %s", tc.name, err, tc.want)
			}
		})
	}

	// Node A's report: the pod it runs holds the anchor, at a path a tenant chose
	// with a terminal escape in it; it also claims the pod node B runs.
	escaped := "/etc/roots/\x1b]0;owned\x07roots.pem"
	file := func(path string) map[string]any {
		return map[string]any{"path": path, "volume": "roots", "file": "roots.pem", "delivery": "native", "anchorSet": set, "changedAt": now.Format("2006-01-02T15:04:05.000000Z07:00")}
	}
	must(t, putReport(t, cp, map[string]any{"metadata": map[string]any{"name": nodeA}, "node": nodeA, "updatedAt": now.Format(time.RFC3339),
		"anchorSets": []any{map[string]any{"id": set, "anchors": []any{heldID}, "count": 1}},
		"pods": []any{
			map[string]any{"namespace": ns, "name": "seen", "uid": string(seen.UID), "files": []any{file(escaped)}},
			map[string]any{"namespace": ns, "name": "on-b", "uid": string(onB.UID), "files": []any{file("/etc/roots/roots.pem")}},
		}}))
	// Node B's report passes the schema but is no use: it speaks for another node.
	must(t, putReport(t, cp, map[string]any{"metadata": map[string]any{"name": nodeB}, "node": nodeA, "updatedAt": now.Format(time.RFC3339)}))
	// Node C has no report at all.
	// Node D's report says its pod holds the anchor, but was last written 400 days
	// ago: its agent stopped long since, and it is believed no more.
	must(t, putReport(t, cp, map[string]any{"metadata": map[string]any{"name": nodeD}, "node": nodeD, "updatedAt": now.Add(-400 * 24 * time.Hour).Format(time.RFC3339),
		"anchorSets": []any{map[string]any{"id": set, "anchors": []any{heldID}, "count": 1}},
		"pods":       []any{map[string]any{"namespace": ns, "name": "on-d", "uid": string(onD.UID), "files": []any{file("/etc/roots/roots.pem")}}}}))

	cli := controlplane.NewPlugin(t, cp)
	type answer struct {
		Anchor  string         `json:"anchor"`
		Items   []query.Holder `json:"items"`
		NotSeen []query.Unseen `json:"notSeen"`
	}
	var a answer
	cli.JSON(t, &a, 3, "who-trusts", heldID, "-n", ns)
	if len(a.Items) != 1 || a.Items[0].Pod != "seen" {
		t.Errorf("who-trusts lists %+v; want the pod node A runs alone (not node B's pod, which A's report claims)", a.Items)
	}
	notSeen := map[string]query.Unseen{}
	for _, u := range a.NotSeen {
		notSeen[u.Node] = u
	}
	if u := notSeen[nodeB]; len(u.Pods) != 1 || u.Pods[0] != ns+"/on-b" || !strings.Contains(u.Reason, "report of node "+nodeB+" unreadable") {
		t.Errorf("the pod on the node whose report is unreadable is not named so: %+v", u)
	}
	if u := notSeen[nodeC]; len(u.Pods) != 1 || !strings.Contains(u.Reason, "no report from node "+nodeC) {
		t.Errorf("the pod on the node without a report is not named so: %+v", u)
	}
	if u := notSeen[nodeD]; len(u.Pods) != 1 || !strings.Contains(u.Reason, "report of node "+nodeD+" is stale") {
		t.Errorf("the pod on the node whose report is 400 days old is not named so: %+v", u)
	}
	if len(a.NotSeen) != 3 {
		t.Errorf("not seen: %+v; want nodes B, C and D alone (the pod that never started holds nothing)", a.NotSeen)
	}

	out, code := cli.Run(t, "who-trusts", nobodyID, "-n", ns)
	if code != 3 || strings.Contains(out, "(no pod holds it)") || !strings.Contains(out, "Not seen: 3 pods with trust files on 3 nodes") {
		t.Errorf("with pods unseen, who-trusts of an anchor nobody seen holds said (exit %d):\n%s", code, out)
	}
	out, _ = cli.Run(t, "who-trusts", heldID, "-n", ns)
	if strings.ContainsAny(out, "\x1b\x07") || !strings.Contains(out, `\x1b]0;owned\aroots.pem`) {
		t.Errorf("a path's terminal escape reached the terminal unescaped:\n%q", out)
	}
	if !strings.Contains(out, "warning: report of node "+nodeB+" unreadable") {
		t.Errorf("the unreadable report is not named:\n%s", out)
	}

	var st struct {
		Items []query.FileStatus `json:"items"`
	}
	cli.JSON(t, &st, 3, "status", "-n", ns)
	states := map[string]query.FileStatus{}
	for _, f := range st.Items {
		states[f.Pod] = f
	}
	if f := states["seen"]; f.State != query.UpToDate {
		t.Errorf("the pod node A's report covers: %+v; want UpToDate", f)
	}
	if f := states["on-b"]; f.State != query.NotObserved || !strings.Contains(f.Reason, "report of node "+nodeB+" unreadable") {
		t.Errorf("the pod on node B: %+v; want NotObserved naming the unreadable report", f)
	}
	if f := states["on-d"]; f.State != query.NotObserved || !strings.Contains(f.Reason, "stale") {
		t.Errorf("the pod on node D: %+v; want NotObserved, its report stale", f)
	}

	// A rotation waits for the running pods alone; the pod that never started is
	// named, not waited for.
	b, err := bundles(t, cp).Get(ctx, bundleName)
	must(t, err)
	status, _ := json.Marshal(bundle.RotationStatus{Phase: "Waiting", Propagation: "observed", CurrentCA: nobodyID, NewCA: heldID})
	b.Annotations = map[string]string{bundle.RotationAnnotation: string(status)}
	_, err = bundles(t, cp).Update(ctx, b, metav1.UpdateOptions{})
	must(t, err)
	type rotation struct {
		Bundle     string            `json:"bundle"`
		Holding    int               `json:"holding"`
		Expected   int               `json:"expected"`
		Stragglers []query.Straggler `json:"stragglers"`
		NotStarted []string          `json:"notStarted"`
	}
	// One rotation prints alone; several as {"items": [...]}.
	var raw json.RawMessage
	cli.JSON(t, &raw, 3, "rotation")
	var rotations struct {
		Items []rotation `json:"items"`
	}
	if err := json.Unmarshal(raw, &rotations); err != nil || len(rotations.Items) == 0 {
		var one rotation
		must(t, json.Unmarshal(raw, &one))
		rotations.Items = []rotation{one}
	}
	for _, r := range rotations.Items {
		if r.Bundle != bundleName {
			continue
		}
		if r.Expected != 4 || r.Holding != 1 || len(r.NotStarted) != 1 || r.NotStarted[0] != ns+"/pending" {
			t.Errorf("rotation: holding %d of %d, not started %v, stragglers %+v; want 1 of 4 (the stale node's pod not holding) with %s/pending not waited for", r.Holding, r.Expected, r.NotStarted, r.Stragglers, ns)
		}
		return
	}
	t.Errorf("rotation does not list bundle %s: %s", bundleName, raw)
}
