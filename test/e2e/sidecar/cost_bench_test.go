package sidecar

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

// BenchmarkAPIServerCost measures what N sidecars cost one kube-apiserver (and its
// etcd): N = 0 is the baseline of the control plane alone. Each sidecar selects one
// bundle by name, on a control plane serving the native API and the mirror CRD, so
// it holds one watch on each. After every sidecar has written its file it measures a
// 30-second idle window (requests per second, open watches, API server and etcd CPU,
// API server resident memory), then one edit of the bundle until every file has it.
//
// The sidecars run in this process, each with its own clients, so every watch and
// request is real; but client-go shares one HTTP/2 connection between clients with
// the same credentials, where pods each open their own, so per-connection memory is
// not in these figures (docs/benchmarks.md estimates it).
func BenchmarkAPIServerCost(b *testing.B) {
	for _, n := range []int{0, 100, 1000} {
		b.Run(fmt.Sprintf("sidecars=%d", n), func(b *testing.B) { benchAPIServerCost(b, n) })
	}
}

func benchAPIServerCost(b *testing.B, n int) {
	cp := planes.Get(b, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	primary, _ := stores(b, cp, true)
	name := "cost-" + strconv.Itoa(n) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	versions := [][]*fixtures.Cert{{fixtures.CA("v1")}, {fixtures.CA("v2"), fixtures.CA("v2b")}}
	if _, err := primary.Create(ctx, ctb(name, "", nil, versions[0]...), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = primary.Delete(context.Background(), name, metav1.DeleteOptions{}) }()

	dirs := startSidecars(b, cp, name, n)
	waitAll(b, dirs, merged(versions[0]...))
	// Let the start-up burst (lists, discovery, Events) drain out of the figures.
	time.Sleep(5 * time.Second)
	for b.Loop() {
		const idle = 30 * time.Second
		before := usage(b, cp)
		time.Sleep(idle)
		u := usage(b, cp).Sub(before)
		b.ReportMetric(u.Requests/idle.Seconds(), "idle-requests/s")
		b.ReportMetric(u.Watches, "watches")
		b.ReportMetric(float64(u.APIServerCPU.Milliseconds())/idle.Seconds(), "idle-apiserver-cpu-ms/s")
		b.ReportMetric(float64(u.EtcdCPU.Milliseconds())/idle.Seconds(), "idle-etcd-cpu-ms/s")
		b.ReportMetric(float64(u.APIServerRSS)/(1<<20), "apiserver-RSS-MiB")

		got, err := primary.Get(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		got.Spec.TrustBundle = fixtures.Bundle(versions[1]...)
		before = usage(b, cp)
		if _, err := primary.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		waitAll(b, dirs, merged(versions[1]...))
		u = usage(b, cp).Sub(before)
		b.ReportMetric(float64(u.APIServerCPU.Milliseconds()), "edit-apiserver-cpu-ms")
		b.ReportMetric(u.Requests, "edit-requests")
	}
}

func usage(b testing.TB, cp *controlplane.ControlPlane) controlplane.Usage {
	u, err := cp.Usage(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return u
}

// BenchmarkAPIServerConnectionCost separates what the in-process sidecars above do not
// show: each pod's sidecar opens its own connection to the API server. It opens 1,000
// watches on ClusterTrustBundles, once over one shared connection (as in-process
// clients do) and once each over its own (as pods do), and reports the API server's
// resident memory growth for each.
func BenchmarkAPIServerConnectionCost(b *testing.B) {
	const n = 1000
	cp := planes.Get(b, true)
	for _, own := range []bool{false, true} {
		b.Run(fmt.Sprintf("own-connections=%v", own), func(b *testing.B) {
			for b.Loop() {
				ctx, cancel := context.WithCancel(context.Background())
				time.Sleep(5 * time.Second)
				before := usage(b, cp)
				shared, err := kubernetes.NewForConfig(cp.AdminConfig())
				if err != nil {
					b.Fatal(err)
				}
				for range n {
					client := shared
					if own {
						cfg := cp.AdminConfig()
						// A dialer of its own keeps client-go from sharing the transport.
						cfg.Dial = (&net.Dialer{}).DialContext
						if client, err = kubernetes.NewForConfig(cfg); err != nil {
							b.Fatal(err)
						}
					}
					w, err := client.CertificatesV1().ClusterTrustBundles().Watch(ctx, metav1.ListOptions{})
					if err != nil {
						b.Fatal(err)
					}
					defer w.Stop()
				}
				time.Sleep(10 * time.Second)
				u := usage(b, cp).Sub(before)
				b.ReportMetric(u.Watches, "watches")
				b.ReportMetric(float64(u.APIServerRSS-before.APIServerRSS)/(1<<20), "apiserver-RSS-growth-MiB")
				cancel()
			}
		})
	}
}
