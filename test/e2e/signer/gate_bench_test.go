package signer

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/signer"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
	"github.com/trustsync/trustsync/test/scrape"
	"github.com/trustsync/trustsync/trustreport"
	"github.com/trustsync/trustsync/trustreport/query"
	"github.com/trustsync/trustsync/trustreport/reader"
)

// BenchmarkRotationGate_10000Pods1000Nodes measures what a rotation waiting for its
// pods costs the API server at 10,000 pods over 1,000 nodes: real API objects, every
// pod running and projecting the signer's live bundle, every node's report saying
// its ten pods hold the old CA. For one minute of waiting, while one node a second
// reports its pods caught up, the gate is asked every 5 s as a waiting rotation asks
// it, once as it was (each time: list every pod, list every report, read the live
// bundle and apply it again) and once as it is (the reader's watches of pods, reports
// and trust objects, and the publisher's watch of the live bundle); and once with no
// gate at all, for what the API server spends on the reports and the rest anyway.
//
// It reports the requests the gate made and the bytes the API server sent it per
// minute (response bodies as served, before any gzip; watch streams included), the
// kube-apiserver's CPU per minute, and what starting the watches cost once. Each
// gate's last answer must count every pod and exactly the pods that caught up: a
// cheaper gate that answers wrong fails.
func BenchmarkRotationGate_10000Pods1000Nodes(b *testing.B) {
	const nodes, perNode = 1000, 10
	const window, every = time.Minute, 5 * time.Second
	cp := planes.Get(b, true)
	ctx := context.Background()
	admin, reports := simulatorClients(cp)
	run := fmt.Sprint(time.Now().Unix())
	ns, signerName := "gate-"+run, "example.com/gate-"+run
	if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { clearSimulated(admin, reports, ns) })

	// The signer's live bundle while a new CA waits: the old CA and the new.
	old, next := fixtures.CA("gate old"), fixtures.CA("gate new")
	oldID, nextID := bundle.AnchorID(old.Cert.Raw), bundle.AnchorID(next.Cert.Raw)
	store := liveStore(b, cp, true)
	live := &certificatesv1.ClusterTrustBundle{TypeMeta: metav1.TypeMeta{APIVersion: "certificates.k8s.io/v1", Kind: "ClusterTrustBundle"},
		ObjectMeta: metav1.ObjectMeta{Name: bundle.NamePrefix(signerName, bundle.NativeForm) + signer.LiveValue, Labels: map[string]string{signer.LiveLabel: signer.LiveValue}},
		Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: signerName, TrustBundle: fixtures.Bundle(old, next)}}
	if _, err := store.Apply(ctx, live, "trustsync-signer"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Delete(context.Background(), live.Name, metav1.DeleteOptions{}) })

	pods, report := simulatedCluster(b, admin, reports, ns, signerName, nodes, perNode, oldID)
	// caught is how many nodes report their pods holding the new CA; one more each
	// second while catchUp runs.
	var caught atomic.Int64
	catchUp := func(ctx context.Context) {
		for range time.Tick(time.Second) {
			if ctx.Err() != nil || caught.Load() == nodes {
				return
			}
			if err := report(int(caught.Load()), oldID, nextID); err != nil {
				b.Error(err)
				return
			}
			caught.Add(1)
		}
	}

	for _, tc := range []struct {
		name string
		gate gate
	}{
		{"none", nil},
		{"listing", listingGate(store, live, nextID)},
		{"watching", watchingGate(store, signerName, nextID)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if tc.gate == nil {
					// What the API server spends on the nodes' reports and
					// everything else running, with no gate at all.
					u0, err := cp.Usage(ctx)
					if err != nil {
						b.Fatal(err)
					}
					churn, stopChurn := context.WithTimeout(ctx, window)
					catchUp(churn)
					stopChurn()
					u1, err := cp.Usage(ctx)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(u1.Sub(u0).APIServerCPU.Milliseconds())*float64(time.Minute)/float64(window), "apiserver-cpu-ms/min")
					continue
				}
				m := &meter{}
				runCtx, stop := context.WithCancel(ctx)
				progress := tc.gate(runCtx, m.config(cp.AdminConfig()))
				if _, err := progress(ctx); err != nil {
					b.Fatal(err)
				}
				start := m.read()
				u0, err := cp.Usage(ctx)
				if err != nil {
					b.Fatal(err)
				}
				churn, stopChurn := context.WithCancel(ctx)
				go catchUp(churn)
				for range window / every {
					time.Sleep(every)
					if _, err := progress(ctx); err != nil {
						b.Fatal(err)
					}
				}
				used := m.read().sub(start)
				u1, err := cp.Usage(ctx)
				if err != nil {
					b.Fatal(err)
				}
				stopChurn()

				// The last answer, once the watches have seen the last report.
				want := int(caught.Load()) * perNode
				var p query.Progress
				if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
					p, err = progress(ctx)
					return err == nil && p.Holding == want, err
				}); err != nil || p.Expected != len(pods) {
					b.Fatalf("the %s gate answered %d of %d pods holding the new CA, want %d of %d (%v)", tc.name, p.Holding, p.Expected, want, len(pods), err)
				}
				stop()

				perMinute := float64(time.Minute) / float64(window)
				b.ReportMetric(float64(used.requests)*perMinute, "requests/min")
				b.ReportMetric(float64(used.bytes)*perMinute/1024, "KiB/min")
				b.ReportMetric(float64(u1.Sub(u0).APIServerCPU.Milliseconds())*perMinute, "apiserver-cpu-ms/min")
				b.ReportMetric(float64(start.requests), "start-requests")
				b.ReportMetric(float64(start.bytes)/1024, "start-KiB")
			}
		})
	}
}

// gate, given the context its watches run in and the client's config, returns how
// far the new CA has reached, asked as a waiting rotation asks it.
type gate func(runCtx context.Context, cfg *rest.Config) func(context.Context) (query.Progress, error)

// listingGate is the gate as it was before the reader: each time a waiting rotation
// asked, it listed every report and every pod (from the watch cache), read the live
// bundle, and the publisher applied the live bundle again.
func listingGate(store *bundleapi.Store, live *certificatesv1.ClusterTrustBundle, anchor string) gate {
	return func(_ context.Context, cfg *rest.Config) func(context.Context) (query.Progress, error) {
		client, dyn := kubernetes.NewForConfigOrDie(cfg), dynamic.NewForConfigOrDie(cfg)
		metered := bundleapi.NewStore(dyn, store.API())
		return func(ctx context.Context) (query.Progress, error) {
			var c query.Cluster
			listing, err := trustreport.List(ctx, dyn)
			if err != nil {
				return query.Progress{}, err
			}
			c.Reports, c.Unreadable = listing.Reports, listing.UnreadableByNode()
			pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
			if err != nil {
				return query.Progress{}, err
			}
			for i := range pods.Items {
				c.Pods = append(c.Pods, &pods.Items[i])
			}
			b, err := metered.Get(ctx, live.Name)
			if err != nil {
				return query.Progress{}, err
			}
			if _, err := metered.Apply(ctx, live, "trustsync-signer"); err != nil {
				return query.Progress{}, err
			}
			return c.Progress(anchor, []*certificatesv1.ClusterTrustBundle{b}), nil
		}
	}
}

// watchingGate is the gate as the signer runs it: the reader's watches and the
// publisher's watch of the live bundle, both started by the first question.
func watchingGate(store *bundleapi.Store, signerName, anchor string) gate {
	return func(runCtx context.Context, cfg *rest.Config) func(context.Context) (query.Progress, error) {
		r := &reader.Reader{Client: kubernetes.NewForConfigOrDie(cfg), Dynamic: dynamic.NewForConfigOrDie(cfg), Metadata: metadata.NewForConfigOrDie(cfg), Resync: 10 * time.Minute}
		metered := bundleapi.NewStore(dynamic.NewForConfigOrDie(cfg), store.API())
		opts, _, _ := bundle.Selector{SignerName: signerName, LabelSelector: &metav1.LabelSelector{}}.ListOptions(store.API().Form)
		liveStore, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: metered.ListWatch(opts), ObjectType: &certificatesv1.ClusterTrustBundle{}, Handler: cache.ResourceEventHandlerFuncs{}})
		go ctrl.RunWithContext(runCtx)
		return func(ctx context.Context) (query.Progress, error) {
			c, _, err := r.Cluster(ctx, runCtx)
			if err != nil || !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
				return query.Progress{}, fmt.Errorf("the gate's watches: %v", err)
			}
			var live []*certificatesv1.ClusterTrustBundle
			for _, obj := range liveStore.List() {
				live = append(live, obj.(*certificatesv1.ClusterTrustBundle))
			}
			if len(live) != 1 {
				return query.Progress{}, fmt.Errorf("the watch holds %d live bundles, want 1", len(live))
			}
			return c.Progress(anchor, live), nil
		}
	}
}

// simulatedCluster makes nodes*perNode pods of ns, perNode on each simulated node,
// each projecting signerName's bundles and running as a kubelet would say (never run:
// there is no kubelet), and each node's report saying its pods hold anchors. report
// writes node n's report again with other anchors.
func simulatedCluster(b *testing.B, admin kubernetes.Interface, reports dynamic.ResourceInterface, ns, signerName string, nodes, perNode int, anchors ...string) ([]*corev1.Pod, func(n int, anchors ...string) error) {
	ctx := context.Background()
	pods := make([]*corev1.Pod, nodes*perNode)
	parallel(b, len(pods), func(i int) error {
		p, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i)},
			Spec: corev1.PodSpec{NodeName: simNode(i / perNode),
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1", VolumeMounts: []corev1.VolumeMount{{Name: "roots", MountPath: "/etc/roots"}}}},
				Volumes: []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{SignerName: ptr.To(signerName), LabelSelector: &metav1.LabelSelector{}, Path: "ca.pem"}}}}}}}}},
			metav1.CreateOptions{})
		if err != nil {
			return err
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "registry.example/app:1",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
		pods[i], err = admin.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	report := func(n int, anchors ...string) error {
		obj, err := nodeReport(simNode(n), pods[n*perNode:(n+1)*perNode], anchors...)
		if err != nil {
			return err
		}
		if cur, err := reports.Get(ctx, obj.GetName(), metav1.GetOptions{}); err == nil {
			obj.SetResourceVersion(cur.GetResourceVersion())
			_, err = reports.Update(ctx, obj, metav1.UpdateOptions{})
			return err
		}
		_, err = reports.Create(ctx, obj, metav1.CreateOptions{})
		return err
	}
	parallel(b, nodes, func(n int) error { return report(n, anchors...) })
	return pods, report
}

// simulatorClients are the admin's clients a simulated cluster is made with, at a rate
// that keeps the API server, not them, the bound.
func simulatorClients(cp *controlplane.ControlPlane) (kubernetes.Interface, dynamic.ResourceInterface) {
	cfg := cp.AdminConfig()
	cfg.QPS, cfg.Burst = 1000, 2000
	return kubernetes.NewForConfigOrDie(cfg), dynamic.NewForConfigOrDie(cfg).Resource(v1alpha1.NodeTrustReportResource)
}

// clearSimulated deletes what simulatedCluster made: no kubelet ends the pods and no
// controller-manager empties the namespace, so they go now, or the next run's lists
// carry them.
func clearSimulated(admin kubernetes.Interface, reports dynamic.ResourceInterface, ns string) {
	_ = admin.CoreV1().Pods(ns).DeleteCollection(context.Background(), *metav1.NewDeleteOptions(0), metav1.ListOptions{})
	_ = admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	_ = reports.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
}

func simNode(n int) string { return fmt.Sprintf("sim-%04d", n) }

// parallel runs do(0..n-1) 32 at a time and stops the benchmark at the first error.
func parallel(b *testing.B, n int, do func(int) error) {
	controlplane.InParallel(n, 32, func(i int) {
		if err := do(i); err != nil {
			b.Error(err)
		}
	})
	if b.Failed() {
		b.FailNow()
	}
}

// meter counts a client's requests and the bytes of the responses it reads.
type meter struct{ requests, bytes atomic.Int64 }

type metered struct{ requests, bytes int64 }

func (m *meter) read() metered { return metered{m.requests.Load(), m.bytes.Load()} }

func (a metered) sub(b metered) metered { return metered{a.requests - b.requests, a.bytes - b.bytes} }

// config is cfg with every request and response byte counted.
func (m *meter) config(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			m.requests.Add(1)
			resp, err := rt.RoundTrip(req)
			if err == nil {
				resp.Body = &countingBody{ReadCloser: resp.Body, n: &m.bytes}
			}
			return resp, err
		})
	})
	return c
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))

	return n, err
}

// BenchmarkSignerMemory_10000Pods1000Nodes gives what the signer's watch of every pod
// (the rotation gate's) costs it: trustsync-signer as released, its rotation gate's
// watches started by a first waiting rotation while none of its pods exists (idle),
// then 10,000 pods over 1,000 simulated nodes projecting its bundle, every node's
// report saying they hold an older CA, and a rotation waiting for them all. It
// reports the signer's resident memory and Go heap in use at idle and waiting, their
// growth per pod, and the watches the API server holds open at each.
func BenchmarkSignerMemory_10000Pods1000Nodes(b *testing.B) {
	const nodes, perNode = 1000, 10
	cp := planes.Get(b, true)
	ctx := context.Background()
	admin, reports := simulatorClients(cp)
	for b.Loop() {
		run := fmt.Sprint(time.Now().Unix())
		ns, signerNamespace, signerName := "memory-"+run, "memory-signer-"+run, "example.com/memory-"+run
		if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
			b.Fatal(err)
		}
		p := startObservedSigner(b, cp, signerNamespace, signerName, "--ca-propagation-max-wait=1h", "--ca-propagation-min-wait=1h")
		metrics := func() scrape.Metrics {
			b.Helper()
			text, err := p.Metrics()
			if err != nil {
				b.Fatal(err)
			}
			m, err := scrape.Parse(text)
			if err != nil {
				b.Fatal(err)
			}
			return m
		}
		sample := func(name string) float64 { return metrics().Sum(name, nil) }
		// The gate's last count of the pods selecting the signer's bundle; -1 before
		// it has counted.
		expected := func() float64 {
			m := metrics()
			if m["trustsync_signer_ca_rotation_pods"] == nil {
				return -1
			}
			return m.Sum("trustsync_signer_ca_rotation_pods", map[string]string{"signer": signerName, "state": "expected"})
		}
		waitForBundle(b, cp, bundle.NamePrefix(signerName, bundle.NativeForm)+signer.LiveValue)
		requestRotation(b, cp, signerNamespace, signerName)
		// The minimum wait holds the rotation while no pod is seen, its gate watching.
		poll.True(b, 2*time.Minute, "the idle signer's gate answering", func() bool { return expected() == 0 })
		idleRSS, idleHeap := settledMemory(b, sample)
		idle, err := cp.Usage(ctx)
		if err != nil {
			b.Fatal(err)
		}

		older := bundle.AnchorID(fixtures.CA("memory older").Cert.Raw)
		simulatedCluster(b, admin, reports, ns, signerName, nodes, perNode, older)
		poll.True(b, 5*time.Minute, "the gate counting every pod", func() bool { return expected() == nodes*perNode })
		rss, heap := settledMemory(b, sample)
		waiting, err := cp.Usage(ctx)
		if err != nil {
			b.Fatal(err)
		}
		pods := float64(nodes * perNode)
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(idleRSS/(1<<20), "idle-rss-MiB")
		b.ReportMetric(rss/(1<<20), "rss-MiB")
		b.ReportMetric((rss-idleRSS)/pods/1024, "rss-KiB/pod")
		b.ReportMetric(idleHeap/(1<<20), "idle-heap-MiB")
		b.ReportMetric((heap-idleHeap)/pods/1024, "heap-KiB/pod")
		b.ReportMetric(idle.Watches, "watches-idle")
		b.ReportMetric(waiting.Watches, "watches-waiting")

		b.StopTimer()
		p.Stop(10 * time.Second)
		clearSimulated(admin, reports, ns)
		b.StartTimer()
	}
}

// settledMemory reads a process's resident memory and Go heap in use once its
// resident memory has stayed within 1% for 5 s (a list's garbage collected).
func settledMemory(b *testing.B, sample func(string) float64) (rss, heap float64) {
	b.Helper()
	last := sample("process_resident_memory_bytes")
	for still := 0; still < 5; {
		time.Sleep(time.Second)
		now := sample("process_resident_memory_bytes")
		if math.Abs(now-last) <= last/100 {
			still++
		} else {
			still = 0
		}
		last = now
	}
	return last, sample("go_memstats_heap_inuse_bytes")
}
