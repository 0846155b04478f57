package federation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/test/fixtures"
)

// BenchmarkFederation_50Peers: one controller importing 50 peers, each an endpoint
// of its own trust domain with a 5 s refresh hint, for three minutes of steady state:
// the requests and bytes the endpoints served, the writes sent to the API server, and
// the controller's memory.
func BenchmarkFederation_50Peers(b *testing.B) {
	const peers, steady = 50, 3 * time.Minute
	c := &clusters{a: planes.Get(b, true)}
	proc, err := c.a.StartController("--namespace=" + namespace)
	if err != nil {
		b.Fatal(err)
	}
	defer proc.Stop(5 * time.Second)
	var requests, bytes atomic.Int64
	for i := range peers {
		td := fmt.Sprintf("peer-%02d.example", i)
		ca := fixtures.CA(td)
		id, _ := url.Parse("spiffe://" + td + v1alpha1.BundleEndpointPath)
		leaf := fixtures.MustNew(fixtures.Options{Leaf: true, URIs: []*url.URL{id}, Parent: ca})
		sb := spiffebundle.FromX509Authorities(spiffeid.RequireTrustDomainFromString(td), []*x509.Certificate{ca.Cert})
		sb.SetSequenceNumber(1)
		sb.SetRefreshHint(5 * time.Second)
		doc, _ := sb.Marshal()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Cert.Raw}, PrivateKey: leaf.Key}}},
			Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				requests.Add(1)
				n, _ := w.Write(doc)
				bytes.Add(int64(n))
			}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.ServeTLS(l, "", "") }()
		defer srv.Close()
		u := c.peer(fmt.Sprintf("bench-%02d", i), "https://"+l.Addr().String()+"/"+td, fixtures.Bundle(ca))
		spec := u.Object["spec"].(map[string]any)
		spec["trustDomain"] = td
		spec["bundleEndpointProfile"].(map[string]any)["endpointSPIFFEID"] = id.String()
		if _, err := dyn(b, c.a).Resource(v1alpha1.FederatedTrustDomainResource).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		defer func(name string) {
			_ = dyn(b, c.a).Resource(v1alpha1.FederatedTrustDomainResource).Delete(context.Background(), name, metav1.DeleteOptions{})
		}(u.GetName())
	}
	start := time.Now()
	for {
		list, err := dyn(b, c.a).Resource(v1alpha1.FederatedTrustDomainResource).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		readyCount := 0
		for i := range list.Items {
			f, _ := v1alpha1.FederatedTrustDomainFromUnstructured(&list.Items[i])
			if st, _, _ := ready(f.Status); st == metav1.ConditionTrue {
				readyCount++
			}
		}
		if readyCount == peers {
			break
		}
		if time.Since(start) > 2*time.Minute {
			b.Fatalf("%d of %d peers Ready after 2 minutes", readyCount, peers)
		}
		time.Sleep(200 * time.Millisecond)
	}
	allReady := time.Since(start)
	writesBefore := metric(b, proc.HealthAddr, "trustsync_federation_writes_total", "")
	requests.Store(0)
	bytes.Store(0)
	b.ResetTimer()
	time.Sleep(steady)
	b.StopTimer()
	writes := metric(b, proc.HealthAddr, "trustsync_federation_writes_total", "") - writesBefore
	b.ReportMetric(allReady.Seconds(), "s-until-all-ready")
	b.ReportMetric(float64(requests.Load())/steady.Minutes()/peers, "requests/peer/min")
	b.ReportMetric(float64(bytes.Load())/steady.Minutes(), "bytes/min")
	b.ReportMetric(writes/steady.Minutes(), "api-writes/min")
	b.ReportMetric(metric(b, proc.HealthAddr, "process_resident_memory_bytes", "")/(1<<20), "controller-MiB")
	b.ReportMetric(metric(b, proc.HealthAddr, "go_memstats_heap_inuse_bytes", "")/(1<<20), "heap-MiB")
}

// metric sums a metric's samples on a component's /metrics, those whose labels
// contain labels (empty: all).
func metric(t testing.TB, addr, name, labels string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if (strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{")) && strings.Contains(line, labels) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}
