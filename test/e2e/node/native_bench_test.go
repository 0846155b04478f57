package node

import (
	"bufio"
	"context"
	"fmt"
	"sort"
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

// setUpSideBySide creates one bundle and two pods reading it: "native" through the
// kubelet's clusterTrustBundle projected volume, "trustsync" through the injected
// sidecar.
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
	for _, p := range []*corev1.Pod{native, sidecar} {
		createPod(b, ns, p)
	}
	for _, p := range []*corev1.Pod{native, sidecar} {
		n.WaitPod(b, ns, p.Name, 2*time.Minute, "Ready", cluster.PodReady)
	}
	return sideBySide{namespace: ns, bundle: name}
}

// BenchmarkNativeVsTrustsync_BundleEdit measures, per edit of one ClusterTrustBundle,
// the time from the update call until the app container of each pod first reads the
// new anchor: the kubelet's native projection against trustsync's sidecar, on the
// same node in the same run. Reported as seconds per edit for each, and their ratio.
func BenchmarkNativeVsTrustsync_BundleEdit(b *testing.B) {
	env := setUpSideBySide(b)
	n := theNode(b)
	var native, trustsync []time.Duration
	for i := 0; i < b.N; i++ {
		marker, start := replaceAnchor(b, n, env.bundle)
		// The native projection has been seen to take minutes; allow ten.
		nt := seenAt(b, env.namespace, "native", marker, 10*time.Minute).Sub(start)
		tt := seenAt(b, env.namespace, "trustsync", marker, 10*time.Minute).Sub(start)
		b.Logf("edit %d: native projection %.2fs, trustsync sidecar %.2fs", i+1, nt.Seconds(), tt.Seconds())
		native, trustsync = append(native, nt), append(trustsync, tt)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(native).Seconds(), "native-s/edit")
	b.ReportMetric(median(trustsync).Seconds(), "trustsync-s/edit")
	b.ReportMetric(float64(median(native))/float64(median(trustsync)), "native/trustsync")
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
