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

	"github.com/fsnotify/fsnotify"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/sidecar"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

// BenchmarkPropagation measures how long a bundle update takes to reach every file:
// N sidecars (in process, each with its own clients, watch and directory) against one
// local kube-apiserver; each iteration edits the bundle and waits until all N have
// swapped their ..data link, seen through inotify. It reports p50, p99 and max of the
// per-sidecar latency from the update call to the swap.
func BenchmarkPropagation(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("sidecars=%d", n), func(b *testing.B) { benchPropagation(b, n) })
	}
}

func benchPropagation(b *testing.B, n int) {
	cp := planes.Get(b, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	primary, _ := stores(b, cp, true)
	name := "propagation-" + strconv.Itoa(n) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	versions := [][]*fixtures.Cert{{fixtures.CA("v1")}, {fixtures.CA("v2"), fixtures.CA("v2b")}}
	if _, err := primary.Create(ctx, ctb(name, "", nil, versions[0]...), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = primary.Delete(context.Background(), name, metav1.DeleteOptions{}) }()

	dirs := startSidecars(b, cp, name, n)
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		b.Fatal(err)
	}
	defer watcher.Close()
	waitAll(b, dirs, merged(versions[0]...))
	for _, d := range dirs {
		if err := watcher.Add(d); err != nil {
			b.Fatalf("inotify watch %s: %v (raise fs.inotify.max_user_watches?)", d, err)
		}
	}

	var latencies []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		next := versions[(i+1)%2]
		got, err := primary.Get(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		got.Spec.TrustBundle = fixtures.Bundle(next...)
		start := time.Now()
		if _, err := primary.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		latencies = append(latencies, swaps(b, watcher, dirs, start)...)
		waitAll(b, dirs, merged(next...))
	}
	b.StopTimer()
	slices.Sort(latencies)
	m := len(latencies)
	b.ReportMetric(ms(latencies[m/2]), "p50-ms")
	b.ReportMetric(ms(latencies[m*99/100]), "p99-ms")
	b.ReportMetric(ms(latencies[m-1]), "max-ms")
}

// startSidecars runs n sidecars in this process until the benchmark ends, each with
// its own clients and its own directory on tmpfs (as an injected pod's memory-backed
// emptyDir is), all writing the bundle named name to ca.pem. Their logs are dropped:
// n lines per update would measure the terminal.
func startSidecars(b *testing.B, cp *controlplane.ControlPlane, name string, n int) []string {
	ctx, cancel := context.WithCancel(context.Background())
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	kubeconfig := filepath.Join(b.TempDir(), "kubeconfig")
	if err := controlplane.WriteKubeconfig(kubeconfig, cp.AdminConfig()); err != nil {
		b.Fatal(err)
	}
	root := tmpfsDir(b)
	dirs := make([]string, n)
	var wg sync.WaitGroup
	b.Cleanup(func() {
		cancel()
		wg.Wait()
		klog.LogToStderr(true)
	})
	for i := range n {
		dirs[i] = filepath.Join(root, strconv.Itoa(i))
		if err := os.Mkdir(dirs[i], 0o755); err != nil {
			b.Fatal(err)
		}
		o := sidecar.NewOptions()
		o.Kubeconfig, o.PodNamespace = kubeconfig, namespace
		o.Spec = contract.Spec{Dir: dirs[i], Sources: []v1alpha1.Source{{Name: name, Path: "ca.pem"}}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sidecar.Run(ctx, o); err != nil {
				b.Error(err)
			}
		}()
	}
	return dirs
}

// tmpfsDir returns a fresh directory on tmpfs (/dev/shm), or fails: a disk-backed
// directory would measure the disk's metadata latency, not the sidecar.
func tmpfsDir(b testing.TB) string {
	dir, err := os.MkdirTemp("/dev/shm", "trustsync-bench-")
	if err != nil {
		b.Skipf("no tmpfs at /dev/shm to measure on: %v", err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// swaps waits for the first ..data swap in each directory after start and returns each
// one's delay.
func swaps(b *testing.B, watcher *fsnotify.Watcher, dirs []string, start time.Time) []time.Duration {
	seen := map[string]time.Duration{}
	timeout := time.After(60 * time.Second)
	for len(seen) < len(dirs) {
		select {
		case ev := <-watcher.Events:
			if filepath.Base(ev.Name) != "..data" || !ev.Has(fsnotify.Create) {
				continue
			}
			dir := filepath.Dir(ev.Name)
			if _, ok := seen[dir]; !ok {
				seen[dir] = time.Since(start)
			}
		case err := <-watcher.Errors:
			b.Fatalf("inotify: %v", err)
		case <-timeout:
			b.Fatalf("only %d of %d sidecars swapped within 60s", len(seen), len(dirs))
		}
	}
	out := make([]time.Duration, 0, len(seen))
	for _, d := range seen {
		out = append(out, d)
	}
	return out
}

// waitAll waits until every directory's ca.pem holds want.
func waitAll(b testing.TB, dirs []string, want []byte) {
	waitEach(b, dirs, func(int) []byte { return want })
}

// waitEach waits until directory i's ca.pem holds want(i), for every i.
func waitEach(b testing.TB, dirs []string, want func(i int) []byte) {
	b.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		for i, d := range dirs {
			got, err := os.ReadFile(filepath.Join(d, "ca.pem"))
			if err != nil || string(got) != string(want(i)) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		b.Fatalf("not every sidecar wrote the expected file: %v", err)
	}
}

// BenchmarkIdleRSS reports the resident memory of one idle `trustsync-sidecar run`
// process holding a 150-anchor bundle: the real binary, as a pod runs it.
func BenchmarkIdleRSS(b *testing.B) {
	benchIdleRSS(b, func(name string) string { return fmt.Sprintf(`[{"name": %q, "path": "ca.pem"}]`, name) })
}

// BenchmarkIdleRSS_Truststores is BenchmarkIdleRSS with the same bundle written
// three ways: PEM, and PKCS#12 and JKS truststores.
func BenchmarkIdleRSS_Truststores(b *testing.B) {
	benchIdleRSS(b, func(name string) string {
		return fmt.Sprintf(`[{"name": %[1]q, "path": "ca.pem"}, {"name": %[1]q, "path": "t.p12", "format": "pkcs12"}, {"name": %[1]q, "path": "t.jks", "format": "jks"}]`, name)
	}, "t.p12", "t.jks")
}

func benchIdleRSS(b *testing.B, sourcesJSON func(bundle string) string, alsoWritten ...string) {
	cp := planes.Get(b, true)
	ctx := context.Background()
	primary, _ := stores(b, cp, true)
	anchors := make([]*fixtures.Cert, 150)
	for i := range anchors {
		anchors[i] = fixtures.CA("anchor " + strconv.Itoa(i))
	}
	name := "rss-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := primary.Create(ctx, ctb(name, "", nil, anchors...), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = primary.Delete(ctx, name, metav1.DeleteOptions{}) }()
	for i := 0; b.Loop(); i++ {
		s := runSidecar(b, cp, "run", podFor(b, cp, name+"-"+strconv.Itoa(i)), sourcesJSON(name))
		s.WaitFor(b, "ca.pem", merged(anchors...))
		for _, f := range alsoWritten {
			if data, err := s.Read(f); err != nil || len(data) == 0 {
				b.Fatalf("%s not written with ca.pem: %v", f, err)
			}
		}
		time.Sleep(5 * time.Second) // idle: the initial list's garbage collected
		rss, err := controlplane.ProcStatusKiB(s.Process.Pid(), "VmRSS:")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rss)/1024, "rss-MiB")
		if anon, err := controlplane.ProcStatusKiB(s.Process.Pid(), "RssAnon:"); err == nil {
			b.ReportMetric(float64(anon)/1024, "anon-MiB")
		}
		s.Process.Stop(5 * time.Second)
	}
}

// BenchmarkOutageRecovery: a running sidecar; the API server stops for 20 s and
// starts again; the bundle is edited as soon as it serves. The figure is the time from
// the API server serving again until the sidecar has written the edit: how long a
// rotation that happens during an outage stays unseen by pods.
func BenchmarkOutageRecovery(b *testing.B) {
	cp := planes.Get(b, true)
	ctx := context.Background()
	primary, _ := stores(b, cp, true)
	a := fixtures.CA("outage bench a")
	name := "outage-bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := primary.Create(ctx, ctb(name, "", nil, a), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	s := runSidecar(b, cp, "run", podFor(b, cp, name), fmt.Sprintf(`[{"name": %q, "path": "ca.pem"}]`, name))
	s.WaitFor(b, "ca.pem", merged(a))
	var total time.Duration
	n := 0
	for i := 0; b.Loop(); i++ {
		cp.StopAPIServer()
		time.Sleep(20 * time.Second)
		if err := cp.StartAPIServer(); err != nil {
			b.Fatal(err)
		}
		back := time.Now()
		next := fixtures.CA("outage bench " + strconv.Itoa(i))
		got, err := primary.Get(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		got.Spec.TrustBundle = fixtures.Bundle(a, next)
		if _, err := primary.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
			data, _ := s.Read("ca.pem")
			return string(data) == string(merged(a, next)), nil
		})
		if err != nil {
			b.Fatal("the sidecar did not write the edit within 3 minutes of the API server's return")
		}
		took := time.Since(back)
		b.Logf("outage %d: the edit reached the file %.2fs after the API server served again", i+1, took.Seconds())
		total += took
		n++
	}
	b.ReportMetric(total.Seconds()/float64(n), "recovery-s")
}
