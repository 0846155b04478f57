package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/agent"
	"github.com/trustsync/trustsync/agent/holdings"
	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

// BenchmarkReports_1000Nodes runs 1,000 simulated nodes of 10 pods each (10,000 pods,
// real API objects projecting one bundle), each node the agent's own observer and
// report publisher (as the agent runs them, without its CSI side) over its pods'
// trust files on tmpfs, against a real API server on the same 2 cores. Each iteration
// edits the bundle, rewrites every pod's file as a delivery would, and waits until
// every report shows every pod holding the new anchor (polling the reports every
// second). It reports the report writes the edit cost (one per node is the floor:
// writes grow with nodes, not pods), the time from the last file written to every
// report showing it, and how long `kubectl trustsync status -A` and `who-trusts` take
// over the 10,000 pods.
func BenchmarkReports_1000Nodes(b *testing.B) {
	const nodes, perNode = 1000, 10
	cp := planes.Get(b, true)
	ctx := context.Background()
	cfg := cp.AdminConfig()
	cfg.QPS, cfg.Burst = 1000, 2000
	client := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	ns := "scale-" + fmt.Sprint(time.Now().Unix())
	if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	versions := []*fixtures.Cert{fixtures.CA("scale v0")}
	name := newBundle(b, cp, versions[0])
	root, err := os.MkdirTemp("/dev/shm", "trustsync-reports-bench-")
	if err != nil {
		b.Skipf("no tmpfs at /dev/shm: %v", err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(root) })

	// The pods, bound to their simulated nodes (never run: there is no kubelet).
	pods := make([]*corev1.Pod, nodes*perNode)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	start := time.Now()
	for i := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			p, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i)},
				Spec: corev1.PodSpec{NodeName: fmt.Sprintf("sim-%04d", i/perNode),
					Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1", VolumeMounts: []corev1.VolumeMount{{Name: "roots", MountPath: "/etc/roots"}}}},
					Volumes: []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
						{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To(name), Path: "ca.pem"}}}}}}}}}, metav1.CreateOptions{})
			if err != nil {
				b.Error(err)
				return
			}
			pods[i] = p
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	b.Logf("created %d pods in %.0fs", len(pods), time.Since(start).Seconds())

	// Each pod's trust file, where the kubelet would keep it.
	file := func(p *corev1.Pod) string {
		return filepath.Join(root, string(p.UID), "volumes", "kubernetes.io~projected", "roots", "ca.pem")
	}
	deliver := func(anchors ...*fixtures.Cert) {
		data := []byte(fixtures.Bundle(anchors...))
		for _, p := range pods {
			must(b, os.MkdirAll(filepath.Dir(file(p)), 0o755))
			tmp := file(p) + ".tmp"
			must(b, os.WriteFile(tmp, data, 0o644))
			must(b, os.Rename(tmp, file(p)))
		}
	}
	deliver(versions...)

	// One observer and publisher per node, as each node's agent runs them.
	var writes, failures atomic.Int64
	// idleSince[n] is when node n's publisher last found nothing to write.
	idleSince := make([]atomic.Int64, nodes)
	pubCtx, stop := context.WithCancel(ctx)
	defer stop()
	for n := range nodes {
		mine := pods[n*perNode : (n+1)*perNode]
		observer := &holdings.Scanner{PodsDir: root}
		p := &agent.ReportPublisher{
			Client: dyn.Resource(v1alpha1.NodeTrustReportResource), Node: fmt.Sprintf("sim-%04d", n),
			Scan:      func() ([]holdings.Pod, bool) { return observer.Scan(mine) },
			ScanEvery: 500 * time.Millisecond, MinInterval: 2 * time.Second, Heartbeat: time.Hour,
			Wrote: func(err error) {
				if err != nil {
					failures.Add(1)
				}
				writes.Add(1)
			},
			Idle: func() { idleSince[n].Store(time.Now().UnixNano()) },
		}
		go p.Run(pubCtx)
	}
	b.Cleanup(func() {
		stop()
		_ = dyn.Resource(v1alpha1.NodeTrustReportResource).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	holding := func(anchor *fixtures.Cert) int {
		list, err := dyn.Resource(v1alpha1.NodeTrustReportResource).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0
		}
		id := bundle.AnchorID(anchor.Cert.Raw)
		n := 0
		for i := range list.Items {
			r, err := v1alpha1.NodeTrustReportFromUnstructured(&list.Items[i])
			if err != nil || !strings.HasPrefix(r.Node, "sim-") {
				continue
			}
			for _, p := range r.Pods {
				for _, f := range p.Files {
					if s, ok := r.Set(f.AnchorSet); ok && slices.Contains(s.Anchors, id) {
						n++
					}
				}
			}
		}
		return n
	}
	waitHolding := func(anchor *fixtures.Cert) {
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(context.Context) (bool, error) {
			return holding(anchor) == len(pods), nil
		}); err != nil {
			b.Fatalf("the reports show %d of %d pods holding %s", holding(anchor), len(pods), anchor.Cert.Subject.CommonName)
		}
	}
	// settled waits until every publisher has scanned since and found nothing to
	// write: every write the change caused is done and counted.
	settled := func() {
		since := time.Now().UnixNano()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			for n := range idleSince {
				if idleSince[n].Load() <= since {
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			b.Fatal("the publishers still had something to write a minute after the reports showed every pod")
		}
	}
	waitHolding(versions[0])
	settled()
	plugin := controlplane.NewPlugin(b, cp)

	var perEdit []float64
	var statusTook, whoTook, reported []time.Duration
	var reportBytes int
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		next := fixtures.CA(fmt.Sprintf("scale v%d", i+1))
		versions = append(versions[len(versions)-1:], next)
		before := writes.Load()
		setBundle(b, cp, name, versions...)
		deliver(versions...)
		delivered := time.Now()
		waitHolding(next)
		reported = append(reported, time.Since(delivered))
		settled()
		perEdit = append(perEdit, float64(writes.Load()-before))

		t0 := time.Now()
		var status struct{ Items []json.RawMessage }
		// Exit 0 or 3: other tests' pods may be behind; the time is what is measured.
		out, code := plugin.Run(b, "status", "-A", "-o", "json")
		statusTook = append(statusTook, time.Since(t0))
		if err := json.Unmarshal([]byte(out), &status); err != nil || code == 1 {
			b.Fatalf("status -A: exit %d, %v", code, err)
		}
		if len(status.Items) < len(pods) {
			b.Fatalf("status -A listed %d files, want at least %d", len(status.Items), len(pods))
		}
		t0 = time.Now()
		var who struct{ Items []json.RawMessage }
		plugin.JSON(b, &who, 0, "who-trusts", bundle.AnchorID(next.Cert.Raw), "-A")
		whoTook = append(whoTook, time.Since(t0))
		if len(who.Items) != len(pods) {
			b.Fatalf("who-trusts listed %d pods, want %d", len(who.Items), len(pods))
		}
	}
	b.StopTimer()
	if u, err := dyn.Resource(v1alpha1.NodeTrustReportResource).Get(ctx, "sim-0000", metav1.GetOptions{}); err == nil {
		data, _ := json.Marshal(u.Object)
		reportBytes = len(data)
	}
	slices.Sort(perEdit)
	b.ReportMetric(perEdit[len(perEdit)/2], "writes/edit")
	b.ReportMetric(float64(failures.Load()), "failed-writes")
	b.ReportMetric(median(reported).Seconds(), "reported-s")
	b.ReportMetric(median(statusTook).Seconds(), "status-A-s")
	b.ReportMetric(median(whoTook).Seconds(), "who-trusts-s")
	b.ReportMetric(float64(reportBytes), "report-bytes")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
