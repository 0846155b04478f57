package sidecar

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/kubeclient"
	"github.com/trustsync/trustsync/delivery/pipeline"
	"github.com/trustsync/trustsync/delivery/render"
	"github.com/trustsync/trustsync/delivery/watch"
	"github.com/trustsync/trustsync/delivery/write"
	"github.com/trustsync/trustsync/kubeapi"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

// manyPods is n pods' pipelines run in this process over one watch registry, as a node
// agent runs the pods of its node: pod i reads the bundle named bundle and the
// ConfigMap configMap(i), merged into its own directory's ca.pem.
type manyPods struct {
	dirs     []string
	registry *watch.Registry
}

func configMapName(i, distinct int) string { return "many-" + strconv.Itoa(i%distinct) }

// startPipelines starts n pipelines reading distinct ConfigMaps among them, each on its
// own directory on tmpfs; they stop when the test ends. Their logs are dropped: n lines
// per edit would measure the terminal.
func startPipelines(tb testing.TB, cp *controlplane.ControlPlane, bundle string, n, distinct int) manyPods {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	tb.Cleanup(func() {
		cancel()
		wg.Wait()
		klog.LogToStderr(true)
	})
	core, err := kubeclient.Core(cp.AdminConfig())
	if err != nil {
		tb.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		tb.Fatal(err)
	}
	reg := watch.New(ctx, dyn, kubeapi.RESTResourceLister{Client: core})
	if _, err := reg.Discover(ctx); err != nil {
		tb.Fatal(err)
	}
	root := tmpfsDir(tb)
	pods := manyPods{registry: reg}
	for i := range n {
		dir := filepath.Join(root, strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			tb.Fatal(err)
		}
		pods.dirs = append(pods.dirs, dir)
		sources, err := v1alpha1.ParseSources(fmt.Appendf(nil, `[{"name": %q, "path": "ca.pem"}, {"configMap": {"name": %q, "key": "ca.crt"}, "path": "ca.pem"}]`, bundle, configMapName(i, distinct)))
		if err != nil {
			tb.Fatal(err)
		}
		plan, err := render.NewPlan(sources, namespace, false)
		if err != nil {
			tb.Fatal(err)
		}
		set, err := reg.Acquire(watch.RequestFor(plan, core, "admin"))
		if err != nil {
			tb.Fatal(err)
		}
		p := pipeline.New(pipeline.Config{Plan: plan, Sources: set, Writer: write.NewAtomicWriter(dir)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer set.Close()
			if set.WaitSynced(ctx) {
				p.Run(ctx)
			}
		}()
	}
	return pods
}

// manyPodsWorld is the bundle and the ConfigMaps many pods read.
type manyPodsWorld struct {
	bundle     string
	bundleCAs  [][]*fixtures.Cert // versions
	configMaps []*fixtures.Cert   // the anchor of ConfigMap many-<i>
}

func newManyPodsWorld(tb testing.TB, cp *controlplane.ControlPlane, distinct int) *manyPodsWorld {
	tb.Helper()
	ctx := context.Background()
	w := &manyPodsWorld{bundle: "many-" + strconv.FormatInt(time.Now().UnixNano(), 36), bundleCAs: [][]*fixtures.Cert{{fixtures.CA("v1")}, {fixtures.CA("v2"), fixtures.CA("v2b")}}}
	primary, _ := stores(tb, cp, true)
	if _, err := primary.Create(ctx, ctb(w.bundle, "", nil, w.bundleCAs[0]...), metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = primary.Delete(context.Background(), w.bundle, metav1.DeleteOptions{}) })
	for i := range distinct {
		ca := fixtures.CA("configmap " + strconv.Itoa(i))
		w.configMaps = append(w.configMaps, ca)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: configMapName(i, distinct)}, Data: map[string]string{"ca.crt": fixtures.Bundle(ca)}}
		if _, err := kube(tb, cp).CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			_ = kube(tb, cp).CoreV1().ConfigMaps(namespace).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
		})
	}
	return w
}

// want is pod i's file with bundle version v.
func (w *manyPodsWorld) want(v int) func(i int) []byte {
	return func(i int) []byte {
		return merged(append([]*fixtures.Cert{w.configMaps[i%len(w.configMaps)]}, w.bundleCAs[v]...)...)
	}
}

// edit sets the bundle to version v.
func (w *manyPodsWorld) edit(tb testing.TB, cp *controlplane.ControlPlane, v int) {
	tb.Helper()
	primary, _ := stores(tb, cp, true)
	got, err := primary.Get(context.Background(), w.bundle)
	if err != nil {
		tb.Fatal(err)
	}
	got.Spec.TrustBundle = fixtures.Bundle(w.bundleCAs[v]...)
	if _, err := primary.Update(context.Background(), got, metav1.UpdateOptions{}); err != nil {
		tb.Fatal(err)
	}
}

// 500 pods' pipelines in one process hold one watch per distinct source (the bundle in
// each served API, and each ConfigMap), not one per pod: the API server sees 12 more
// watches, not 1,500; and an edit reaches every pod's directory.
func TestPipelines_ManyPodsShareOneWatchPerDistinctSource(t *testing.T) {
	const pods, configMaps = 500, 10
	cp := planes.Get(t, true)
	w := newManyPodsWorld(t, cp, configMaps)
	before := usage(t, cp).Watches

	many := startPipelines(t, cp, w.bundle, pods, configMaps)
	waitEach(t, many.dirs, w.want(0))
	// The bundle in the native API and in the mirror CRD, and each ConfigMap.
	const distinct = 2 + configMaps
	if got := many.registry.Watches(); got != distinct {
		t.Errorf("the registry runs %d watches for %d pods, want %d: one per distinct source", got, pods, distinct)
	}
	// The API server's gauge settles once the start-up lists are done and any watch of
	// an earlier test has closed.
	var grew float64
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		grew = usage(t, cp).Watches - before
		return grew == distinct, nil
	})
	if err != nil {
		t.Errorf("the API server holds %v more watches with %d pods running, want %d", grew, pods, distinct)
	}

	start := time.Now()
	w.edit(t, cp, 1)
	waitEach(t, many.dirs, w.want(1))
	t.Logf("a bundle edit reached all %d directories in %v", pods, time.Since(start).Round(time.Millisecond))
}

// BenchmarkManyPipelines measures one process running 500 pods' pipelines over one
// registry: how long an edit of the bundle they all read takes to reach all 500
// directories, and the process's resident memory for them.
func BenchmarkManyPipelines(b *testing.B) {
	const pods, configMaps = 500, 10
	cp := planes.Get(b, true)
	w := newManyPodsWorld(b, cp, configMaps)
	rssBefore := selfRSS(b)
	start := time.Now()
	many := startPipelines(b, cp, w.bundle, pods, configMaps)
	waitEach(b, many.dirs, w.want(0))
	startAll := time.Since(start)
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		v := (i + 1) % 2
		start := time.Now()
		w.edit(b, cp, v)
		waitEach(b, many.dirs, w.want(v))
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(ms(startAll), "start-all-ms")
	b.ReportMetric(ms(took[len(took)/2]), "edit-to-all-ms")
	b.ReportMetric(float64(selfRSS(b)-rssBefore)/1024, "RSS-growth-MiB")
	b.ReportMetric(float64(many.registry.Watches()), "watches")
}

// selfRSS is this process's resident memory in KiB.
func selfRSS(tb testing.TB) uint64 {
	kib, err := controlplane.ProcStatusKiB(os.Getpid(), "VmRSS:")
	if err != nil {
		tb.Fatal(err)
	}
	return uint64(kib)
}
