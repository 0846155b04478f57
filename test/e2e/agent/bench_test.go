package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/trustsync/trustsync/agent/store"
	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

// BenchmarkAgent_1000Volumes is one agent process serving 1,000 pods' volumes, each
// selecting the same bundle, published through its CSI socket as the kubelet would,
// against a real API server on the same 2 cores: the agent's resident memory per
// volume above its base, the API server's watches with 1 volume and with 1,000, the
// time a publish takes, and, per edit of the bundle, the time until each volume's
// files were swapped (p50, p99, max over every volume and edit).
func BenchmarkAgent_1000Volumes(b *testing.B) {
	const volumes = 1000
	cp := planes.Get(b, true)
	versions := []*fixtures.Cert{fixtures.CA("bench v0"), fixtures.CA("bench v1")}
	name := newBundle(b, cp, versions[0])
	a := startAgent(b, cp, "-v=0")
	pods := make([]*corev1.Pod, volumes)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			pods[i] = newPod(b, cp, fmt.Sprintf("bench-%d", i), "web", nodeName, map[string]string{injector.AnnotationBundleName: name})
		}()
	}
	wg.Wait()
	time.Sleep(2 * time.Second)
	baseRSS := procRSS(b, a)
	if err := a.publish(b, cp, pods[0], nil); err != nil {
		b.Fatal(err)
	}
	watchesWithOne := settledWatches(b, cp)
	publishTook := make([]time.Duration, volumes)
	for i := 1; i < volumes; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			start := time.Now()
			if err := a.publish(b, cp, pods[i], nil); err != nil {
				b.Error(err)
			}
			publishTook[i] = time.Since(start)
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	watchesWithAll := settledWatches(b, cp)
	time.Sleep(5 * time.Second) // past start-up: what the node keeps holding
	allRSS := procRSS(b, a)

	dirs := make([]string, volumes)
	for i, pod := range pods {
		dirs[i] = store.Store{Root: a.dataDir}.Files(volumeID(pod))
	}
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		b.Fatal(err)
	}
	defer watcher.Close()
	for _, d := range dirs {
		if err := watcher.Add(d); err != nil {
			b.Fatalf("inotify on %s: %v (raise fs.inotify.max_user_watches)", d, err)
		}
	}
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		v := (i + 1) % 2
		start := time.Now()
		setBundle(b, cp, name, versions[v])
		took = append(took, swapsIn(b, watcher, dirs, start)...)
		waitAllFiles(b, a, pods, merged(versions[v]))
	}
	slices.Sort(took)
	slices.Sort(publishTook[1:])
	b.ReportMetric(float64(baseRSS)/1024, "base-RSS-MiB")
	b.ReportMetric(float64(allRSS-baseRSS)/volumes, "KiB/volume")
	b.ReportMetric(watchesWithOne, "apiserver-watches-1-volume")
	b.ReportMetric(watchesWithAll, "apiserver-watches-1000-volumes")
	b.ReportMetric(ms(publishTook[1+len(publishTook[1:])/2]), "publish-p50-ms")
	b.ReportMetric(ms(took[len(took)/2]), "edit-p50-ms")
	b.ReportMetric(ms(took[len(took)*99/100]), "edit-p99-ms")
	b.ReportMetric(ms(took[len(took)-1]), "edit-max-ms")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func procRSS(tb testing.TB, a *agentProc) int {
	tb.Helper()
	kib, err := controlplane.ProcStatusKiB(a.proc.Pid(), "VmRSS:")
	if err != nil {
		tb.Fatal(err)
	}
	return kib
}

// swapsIn waits for the first ..data swap in each directory after start and returns
// each one's delay.
func swapsIn(tb testing.TB, watcher *fsnotify.Watcher, dirs []string, start time.Time) []time.Duration {
	tb.Helper()
	seen := map[string]time.Duration{}
	timeout := time.After(2 * time.Minute)
	for len(seen) < len(dirs) {
		select {
		case ev := <-watcher.Events:
			if filepath.Base(ev.Name) != "..data" || !ev.Has(fsnotify.Create) {
				continue
			}
			if dir := filepath.Dir(ev.Name); seen[dir] == 0 {
				seen[dir] = time.Since(start)
			}
		case err := <-watcher.Errors:
			tb.Fatalf("inotify: %v", err)
		case <-timeout:
			tb.Fatalf("only %d of %d volumes swapped within 2 minutes", len(seen), len(dirs))
		}
	}
	out := make([]time.Duration, 0, len(seen))
	for _, d := range seen {
		out = append(out, d)
	}
	return out
}

// waitAllFiles waits until every pod's file, as the pod would read it, holds want.
func waitAllFiles(tb testing.TB, a *agentProc, pods []*corev1.Pod, want []byte) {
	tb.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, pod := range pods {
			if got, err := os.ReadFile(filepath.Join(a.target(pod), "ca_certificates.pem")); err != nil || string(got) != string(want) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		tb.Fatal("not every pod's file holds the edit")
	}
}
