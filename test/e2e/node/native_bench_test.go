package node

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/fixtures"
)

// watchScript runs in each app container: it reads the trust file every 50 ms and
// prints the file's first base64 line (unique to the one anchor it holds) whenever it
// changes. The container runtime stamps each log line as it reads it, so the log says
// when the app first saw an edit, on the node's own clock, with no exec polling in
// the measurement.
func watchScript(file string) string {
	return `last=
while true; do
  cur=$(sed -n 2p ` + file + ` 2>/dev/null)
  if [ -n "$cur" ] && [ "$cur" != "$last" ]; then echo "SEEN $cur"; last=$cur; fi
  usleep 50000
done`
}

type sideBySide struct {
	namespace string
	bundle    string
}

// sideBySideRuns numbers the benchmark's runs (testing calls it with b.N = 1 first):
// each run gets its own namespace and bundle, removed when it ends.
var sideBySideRuns int

// setUpSideBySide creates one bundle and three pods reading it: "native" through the
// kubelet's clusterTrustBundle projected volume, "trustsync" through the injected
// sidecar, and "node" through the node agent's CSI volume (delivery node).
func setUpSideBySide(b *testing.B) sideBySide {
	n := installChart(b)
	sideBySideRuns++
	ns := n.Namespace(b, fmt.Sprintf("native-vs-trustsync-%d", sideBySideRuns), restricted)
	name := fmt.Sprintf("e2e-side-by-side-%d", sideBySideRuns)
	createBundle(b, name, fixtures.CA("side-by-side first"))

	native := appPod("native", nil, 1000, watchScript("/trust/ca.pem"))
	native.Spec.Volumes = []corev1.Volume{{Name: "trust", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: &name, Path: "ca.pem"}}},
	}}}}
	native.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "trust", MountPath: "/trust", ReadOnly: true}}
	sidecar := appPod("trustsync", map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": name}, 1000,
		watchScript(mountPath+"/ca_certificates.pem"))
	node := appPod("node", map[string]string{"trustsync.io/inject": "true", "trustsync.io/delivery": "node", "trustsync.io/bundle-name": name}, 1000,
		watchScript(mountPath+"/ca_certificates.pem"))
	pods := []*corev1.Pod{native, sidecar, node}
	for _, p := range pods {
		createPod(b, ns, p)
	}
	for _, p := range pods {
		n.WaitPod(b, ns, p.Name, 2*time.Minute, "Ready", cluster.PodReady)
	}
	return sideBySide{namespace: ns, bundle: name}
}

// BenchmarkNativeVsTrustsync_BundleEdit measures, per edit of one ClusterTrustBundle,
// the time from the update call until the app container of each pod first reads the
// new anchor, for the three deliveries on the same node in the same run: the kubelet's
// native projection, trustsync's sidecar and trustsync's node agent. Reported as the
// median and the maximum seconds per edit for each, their ratios, and each pod's
// memory as its cgroup counts it.
func BenchmarkNativeVsTrustsync_BundleEdit(b *testing.B) {
	env := setUpSideBySide(b)
	n := theNode(b)
	var native, trustsync, node []time.Duration
	for i := 0; i < b.N; i++ {
		marker, start := replaceAnchor(b, n, env.bundle)
		// The native projection has been seen to take minutes; allow ten.
		nt := seenAt(b, env.namespace, "native", marker, 10*time.Minute).Sub(start)
		tt := seenAt(b, env.namespace, "trustsync", marker, 10*time.Minute).Sub(start)
		at := seenAt(b, env.namespace, "node", marker, 10*time.Minute).Sub(start)
		b.Logf("edit %d: native projection %.2fs, trustsync sidecar %.2fs, trustsync node agent %.2fs", i+1, nt.Seconds(), tt.Seconds(), at.Seconds())
		native, trustsync, node = append(native, nt), append(trustsync, tt), append(node, at)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(native).Seconds(), "native-s/edit")
	b.ReportMetric(median(trustsync).Seconds(), "trustsync-s/edit")
	b.ReportMetric(median(node).Seconds(), "node-s/edit")
	b.ReportMetric(slices.Max(native).Seconds(), "native-max-s")
	b.ReportMetric(slices.Max(trustsync).Seconds(), "trustsync-max-s")
	b.ReportMetric(slices.Max(node).Seconds(), "node-max-s")
	b.ReportMetric(float64(median(native))/float64(median(trustsync)), "native/trustsync")
	b.ReportMetric(float64(median(node))/float64(median(trustsync)), "node/sidecar")
	for _, pod := range []string{"native", "trustsync", "node"} {
		b.ReportMetric(podMemoryMiB(b, n, env.namespace, pod), pod+"-pod-MiB")
	}
}

// podMemoryMiB is the memory the pod's cgroup charges now (cgroup v1, the kubelet's
// cgroupfs driver): its containers' working memory, page cache included.
func podMemoryMiB(b *testing.B, n *cluster.Node, namespace, name string) float64 {
	b.Helper()
	pod, err := n.Client.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	matches, _ := filepath.Glob("/sys/fs/cgroup/memory/kubepods/*/pod" + string(pod.UID) + "/memory.usage_in_bytes")
	if more, _ := filepath.Glob("/sys/fs/cgroup/memory/kubepods/pod" + string(pod.UID) + "/memory.usage_in_bytes"); len(more) > 0 {
		matches = append(matches, more...)
	}
	if len(matches) != 1 {
		b.Fatalf("the memory cgroup of pod %s: found %v", name, matches)
	}
	raw, err := os.ReadFile(matches[0])
	if err != nil {
		b.Fatal(err)
	}
	bytes, err := strconv.ParseFloat(strings.TrimSpace(string(raw)), 64)
	if err != nil {
		b.Fatal(err)
	}
	return bytes / (1 << 20)
}

// replaceAnchor replaces the one anchor of bundle with a new one, and returns the
// marker an app logs when it reads it (its PEM's first base64 line) and when the
// update call began.
func replaceAnchor(b *testing.B, n *cluster.Node, bundle string) (string, time.Time) {
	b.Helper()
	ctbs := n.Client.CertificatesV1().ClusterTrustBundles()
	anchor := fixtures.CA(fmt.Sprintf("%s %d", bundle, time.Now().UnixNano()))
	ctb, err := ctbs.Get(context.Background(), bundle, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ctb.Spec.TrustBundle = pemOf(anchor)
	start := time.Now()
	if _, err := ctbs.Update(context.Background(), ctb, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	return strings.Split(string(anchor.CertPEM()), "\n")[1], start
}

// seenAt waits until the app container of pod has logged marker and returns the
// runtime's timestamp of that line.
func seenAt(b *testing.B, namespace, pod, marker string, timeout time.Duration) time.Time {
	b.Helper()
	n := theNode(b)
	var at time.Time
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		raw, err := n.Client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: "app", Timestamps: true}).Do(ctx).Raw()
		if err != nil {
			return false, nil
		}
		sc := bufio.NewScanner(strings.NewReader(string(raw)))
		for sc.Scan() {
			stamp, line, ok := strings.Cut(sc.Text(), " ")
			if !ok || line != "SEEN "+marker {
				continue
			}
			if at, err = time.Parse(time.RFC3339Nano, stamp); err != nil {
				return false, fmt.Errorf("log timestamp %q: %w", stamp, err)
			}
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		b.Fatalf("the app of pod %s/%s did not see the edit within %s: %v", namespace, pod, timeout, err)
	}
	return at
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
