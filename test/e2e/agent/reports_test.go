package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/trustreport/query"
)

// The agent reports what every pod on its node holds, whoever delivered it: its own
// volumes, a sidecar's emptyDir and the kubelet's projected bundle (here written by
// the test where the sidecar and the kubelet would write them), one set of anchors
// stored once; an edit shows in the report once each pod holds it, pod by pod; the
// report is owned by the node; and the agent never opens the sidecar's key, kept in
// the same volume as the trust file it reads.
func TestAgent_ReportsWhatEveryPodOnItsNodeHoldsWhoeverDeliveredIt(t *testing.T) {
	cp := planes.Get(t, true)
	v1, v2 := fixtures.CA("report v1"), fixtures.CA("report v2")
	name := newBundle(t, cp, v1)
	a := startAgent(t, cp)

	nodePod := newPod(t, cp, "report-node", "web", nodeName, map[string]string{injector.AnnotationBundleName: name})
	if err := a.publish(t, cp, nodePod, nil); err != nil {
		t.Fatal(err)
	}
	sidecarPod := newPod(t, cp, "report-sidecar", "web", nodeName, map[string]string{
		injector.AnnotationBundleName: name, injector.AnnotationDelivery: string(v1alpha1.DeliverySidecar), injector.AnnotationCertificate: "true"})
	nativePod := createPod(t, cp, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "report-native", Namespace: namespace},
		Spec: corev1.PodSpec{NodeName: nodeName, ServiceAccountName: "web",
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1", VolumeMounts: []corev1.VolumeMount{{Name: "roots", MountPath: "/etc/roots"}}}},
			Volumes: []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To(name), Path: "roots.pem"}}}}}}}}})

	sidecarDir := filepath.Join(a.podsDir, string(sidecarPod.UID), "volumes", "kubernetes.io~empty-dir", "trustsync-anchors")
	nativeDir := filepath.Join(a.podsDir, string(nativePod.UID), "volumes", "kubernetes.io~projected", "roots")
	key := fixtures.CA("report workload key")
	writeVersion(t, sidecarDir, "1", map[string][]byte{injector.DefaultPath: []byte(fixtures.Bundle(v1)), "tls.key": key.KeyPEM(), "tls.crt": key.CertPEM()})
	writeVersion(t, nativeDir, "1", map[string][]byte{"roots.pem": []byte(fixtures.Bundle(v1))})
	keyOpened := cluster.WatchOpens(t, filepath.Join(sidecarDir, "..1", "tls.key"))

	want := map[string]string{
		"report-node/" + injector.DefaultMountPath + "/" + injector.DefaultPath:    string(v1alpha1.DeliveryNode),
		"report-sidecar/" + injector.DefaultMountPath + "/" + injector.DefaultPath: string(v1alpha1.DeliverySidecar),
		"report-native//etc/roots/roots.pem":                                       string(v1alpha1.DeliveryNative),
	}
	holding := func(r *v1alpha1.NodeTrustReport, anchors ...*fixtures.Cert) []string {
		var ids []string
		for _, c := range anchors {
			ids = append(ids, bundle.AnchorID(c.Cert.Raw))
		}
		slices.Sort(ids)
		var out []string
		for _, p := range r.Pods {
			for _, f := range p.Files {
				s, _ := r.Set(f.AnchorSet)
				if d, ok := want[p.Name+"/"+f.Path]; ok && d == f.Delivery && slices.Equal(s.Anchors, ids) {
					out = append(out, p.Name)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	r := waitReport(t, cp, "every pod holding v1", func(r *v1alpha1.NodeTrustReport) bool { return len(holding(r, v1)) == 3 })
	if owners := r.OwnerReferences; len(owners) != 1 || owners[0].Kind != "Node" || owners[0].Name != nodeName || owners[0].UID == "" {
		t.Errorf("the report's owners are %+v, want the Node %s", owners, nodeName)
	}

	// The edit: the agent rewrites its own volume; the sidecar's file and the
	// kubelet's lag behind, and the report says so, pod by pod.
	setBundle(t, cp, name, v1, v2)
	waitReport(t, cp, "the node pod holding v1 and v2, the others v1", func(r *v1alpha1.NodeTrustReport) bool {
		return slices.Equal(holding(r, v1, v2), []string{"report-node"}) && len(holding(r, v1)) == 2
	})
	// kubectl trustsync, meanwhile: the node pod is up to date, the other two behind,
	// missing v2, and only the node pod holds v2.
	cli := controlplane.NewPlugin(t, cp)
	// Exit 3 while any file is behind, 0 once all are current.
	states := func(code int) map[string]query.FileStatus {
		var got struct{ Items []query.FileStatus }
		cli.JSON(t, &got, code, "status", "-n", namespace)
		out := map[string]query.FileStatus{}
		for _, f := range got.Items {
			if strings.HasPrefix(f.Pod, "report-") {
				out[f.Pod] = f
			}
		}
		return out
	}
	v2ID := bundle.AnchorID(v2.Cert.Raw)
	st := states(3)
	if st["report-node"].State != query.UpToDate || st["report-sidecar"].State != query.Behind || st["report-native"].State != query.Behind ||
		!slices.Equal(st["report-native"].Missing, []string{v2ID}) {
		t.Errorf("status while two pods lag: %+v", st)
	}
	v2File := filepath.Join(t.TempDir(), "v2.pem")
	must(t, os.WriteFile(v2File, v2.CertPEM(), 0o644))
	var who struct {
		Anchor string
		Items  []query.Holder
	}
	cli.JSON(t, &who, 0, "who-trusts", v2File, "-A")
	if who.Anchor != v2ID || len(who.Items) != 1 || who.Items[0].Pod != "report-node" || who.Items[0].Delivery != "node" {
		t.Errorf("who-trusts v2 while two pods lag: %+v", who)
	}

	writeVersion(t, sidecarDir, "2", map[string][]byte{injector.DefaultPath: []byte(fixtures.Bundle(v1, v2))})
	writeVersion(t, nativeDir, "2", map[string][]byte{"roots.pem": []byte(fixtures.Bundle(v1, v2))})
	r = waitReport(t, cp, "every pod holding v1 and v2", func(r *v1alpha1.NodeTrustReport) bool { return len(holding(r, v1, v2)) == 3 })
	for _, p := range r.Pods {
		for _, f := range p.Files {
			if f.Path == "" || f.ChangedAt == nil {
				t.Errorf("%s's file %s has no path or time it changed: %+v", p.Name, f.File, f)
			}
		}
	}
	cli.JSON(t, &who, 0, "who-trusts", v2ID[:12], "-A")
	var pods []string
	for _, h := range who.Items {
		pods = append(pods, h.Pod+" "+h.Delivery+" "+h.Path)
	}
	if want := []string{"report-native native /etc/roots/roots.pem", "report-node node " + injector.DefaultMountPath + "/" + injector.DefaultPath,
		"report-sidecar sidecar " + injector.DefaultMountPath + "/" + injector.DefaultPath}; !slices.Equal(pods, want) {
		t.Errorf("who-trusts %s (a 12-digit prefix) = %v, want %v", v2ID[:12], pods, want)
	}
	for pod, f := range states(0) {
		if f.State != query.UpToDate {
			t.Errorf("%s is %s once every pod holds v1 and v2: %+v", pod, f.State, f)
		}
	}
	if st := states(0)["report-native"]; st.CaughtUpAfter == nil {
		t.Errorf("the native delivery's latency is not given: %+v", st)
	}
	nobody := filepath.Join(t.TempDir(), "nobody.pem")
	must(t, os.WriteFile(nobody, fixtures.CA("trusted by nobody").CertPEM(), 0o644))
	cli.JSON(t, &who, 3, "who-trusts", nobody, "-A")
	if len(who.Items) != 0 {
		t.Errorf("who-trusts an anchor nobody holds: %+v", who)
	}
	if out, code := cli.Run(t, "who-trusts", "12ab"); code != 1 || !strings.Contains(out, "too short a prefix: give at least 12 hex digits") {
		t.Errorf("who-trusts 12ab: exit %d, %q; want 1 and the reason", code, out)
	}

	// Nothing but the agent runs here, so nothing may open the key at all.
	if openers := keyOpened(); len(openers) > 0 {
		t.Errorf("the sidecar's key was opened while the agent observed its volume, by %v", openers)
	}
	if got := a.metric(t, "trustsync_agent_report_writes_total{result=\"ok\"}"); got == "" || got == "0" {
		t.Errorf("trustsync_agent_report_writes_total{result=\"ok\"} = %q", got)
	}
}

// An agent may write its own node's report alone: the API server's admission refuses
// another node's, naming both, and a token that names no node.
func TestAgent_MayWriteItsOwnNodesReportAlone(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	pod, err := kube(t, cp).CoreV1().Pods(agentNamespace).Get(ctx, agentPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bound, err := cp.PodServiceAccountConfig(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	unbound, err := cp.ServiceAccountConfig(ctx, agentNamespace, "trustsync-agent")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		cfg     *rest.Config
		report  string
		wantErr string
	}{
		{name: "the agent on node-e2e writes node-e2e's", cfg: bound, report: nodeName},
		{name: "the agent on node-e2e writes node-other's", cfg: bound, report: otherNode,
			wantErr: "an agent on node " + nodeName + " may write NodeTrustReport " + nodeName + " alone, not " + otherNode},
		{name: "the agent's ServiceAccount with a token bound to no pod", cfg: unbound, report: otherNode,
			wantErr: "may be written only with a token bound to a pod on node " + otherNode + "; this token names no node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dynamic.NewForConfigOrDie(tc.cfg).Resource(v1alpha1.NodeTrustReportResource)
			obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": v1alpha1.NodeTrustReportKind,
				"metadata": map[string]any{"name": tc.report}, "node": tc.report, "updatedAt": time.Now().UTC().Format(time.RFC3339)}}
			_, err := c.Create(ctx, obj, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				var cur *unstructured.Unstructured
				if cur, err = c.Get(ctx, tc.report, metav1.GetOptions{}); err == nil {
					obj.SetResourceVersion(cur.GetResourceVersion())
					_, err = c.Update(ctx, obj, metav1.UpdateOptions{})
				}
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v; want Forbidden saying %q", err, tc.wantErr)
			}
			if tc.wantErr != "" {
				if _, err := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.NodeTrustReportResource).Get(ctx, tc.report, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("the refused report exists: %v", err)
				}
			}
		})
	}
}

// Whoever carries no node name and is not the agent is left to RBAC: an admin with a
// client certificate (no userInfo.extra at all) creates, updates and deletes a report,
// as the garbage collector deletes a deleted node's.
func TestReports_AnAdminWithoutExtraIsNotLockedOut(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	c := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.NodeTrustReportResource)
	const gone = "node-deleted"
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": v1alpha1.NodeTrustReportKind,
		"metadata": map[string]any{"name": gone}, "node": gone, "updatedAt": time.Now().UTC().Format(time.RFC3339)}}
	created, err := c.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("an admin cannot create a report: %v", err)
	}
	created.Object["updatedAt"] = time.Now().Add(time.Second).UTC().Format(time.RFC3339)
	if _, err := c.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("an admin cannot update a report: %v", err)
	}
	if err := c.Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("an admin cannot delete a report: %v", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// waitReport waits until the node's report satisfies ok, and returns it.
func waitReport(t *testing.T, cp *controlplane.ControlPlane, what string, ok func(*v1alpha1.NodeTrustReport) bool) *v1alpha1.NodeTrustReport {
	t.Helper()
	c := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.NodeTrustReportResource)
	var last *v1alpha1.NodeTrustReport
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := c.Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if last, err = v1alpha1.NodeTrustReportFromUnstructured(u); err != nil {
			return false, err
		}
		return ok(last), nil
	})
	if err != nil {
		t.Fatalf("the report of %s does not show %s: %v; it is %+v", nodeName, what, err, last)
	}
	return last
}

// createPod creates pod as it is; it is deleted when the test ends.
func createPod(t *testing.T, cp *controlplane.ControlPlane, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := kube(t, cp).CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube(t, cp).CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, *metav1.NewDeleteOptions(0))
	})
	return created
}

// writeVersion writes files into dir as the kubelet's atomic writer (and the
// sidecar's) does: a directory per version, ..data pointing at the latest, and each
// file a link through ..data.
func writeVersion(t *testing.T, dir, version string, files map[string][]byte) {
	t.Helper()
	ts := filepath.Join(dir, ".."+version)
	if err := os.MkdirAll(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(ts, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(".."+version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}
