package signer

import (
	"context"
	"crypto/x509"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

// BenchmarkSigning creates 1,000 CSRs, approves each from the benchmark itself, and
// times until every one is issued: once for kube-controller-manager's own signer (its
// csrsigning controller, kubernetes.io/kube-apiserver-client) and once for
// trustsync-signer, against the same kube-apiserver in the same run.
//
// Both are run at kube-controller-manager's default client rate limit (20 QPS, burst
// 30), where one status write per certificate bounds them alike, and at 200 QPS, burst
// 300, which compares the signers themselves; trustsync-signer also at its own
// defaults, which the chart runs it with.
func BenchmarkSigning(b *testing.B) {
	const n = 1000
	cp := planes.Get(b, true)
	type signer struct {
		name, signer string
		start        func(*testing.B, *controlplane.ControlPlane, []string) *controlplane.Process
	}
	kcm := signer{"kube-controller-manager", "kubernetes.io/kube-apiserver-client", startControllerManager}
	trustsync := signer{"trustsync-signer", "example.com/bench", startBenchSigner}
	for _, tc := range []struct {
		signers []signer
		qps     string // "" for each binary's own default
	}{
		{[]signer{kcm, trustsync}, "20"},
		{[]signer{kcm, trustsync}, "200"},
		{[]signer{trustsync}, ""},
	} {
		var limits []string
		label := "qps=default"
		if tc.qps != "" {
			qps, _ := strconv.Atoi(tc.qps)
			limits = []string{"--kube-api-qps=" + tc.qps, "--kube-api-burst=" + strconv.Itoa(qps*3/2)}
			label = "qps=" + tc.qps
		}
		for _, s := range tc.signers {
			b.Run(s.name+"/"+label, func(b *testing.B) {
				p := s.start(b, cp, limits)
				defer p.Stop(10 * time.Second)
				for i := 0; b.Loop(); i++ {
					took := issueAll(b, cp, s.signer, s.name+"-"+strings.TrimPrefix(label, "qps=")+"-"+strconv.Itoa(i), n)
					b.ReportMetric(float64(n)/took.Seconds(), "issued/s")
				}
			})
		}
	}
}

// issueAll creates n CSRs for signer, approves them, and returns the time from the
// first create until the last certificate is written.
func issueAll(b *testing.B, cp *controlplane.ControlPlane, signer, prefix string, n int) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The benchmark's own creates and approvals must never be what limits the rate.
	cfg := cp.AdminConfig()
	cfg.QPS, cfg.Burst = 5000, 5000
	client := kube(b, cfg)
	csrs := client.CertificatesV1().CertificateSigningRequests()

	// Count certificates as they are written, from a watch on this signer's CSRs.
	var issued atomic.Int64
	done := make(chan struct{})
	informer := cache.NewSharedIndexInformer(cache.NewFilteredListWatchFromClient(client.CertificatesV1().RESTClient(), "certificatesigningrequests", "", func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", signer).String()
	}), &certificatesv1.CertificateSigningRequest{}, 0, cache.Indexers{})
	seen := sync.Map{}
	count := func(obj any) {
		csr := obj.(*certificatesv1.CertificateSigningRequest)
		if len(csr.Status.Certificate) > 0 && len(csr.Name) > len(prefix) && csr.Name[:len(prefix)] == prefix {
			if _, dup := seen.LoadOrStore(csr.Name, true); !dup && issued.Add(1) == int64(n) {
				close(done)
			}
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: count, UpdateFunc: func(_, o any) { count(o) }}); err != nil {
		b.Fatal(err)
	}
	go informer.RunWithContext(ctx)
	cache.WaitForCacheSync(ctx.Done(), informer.HasSynced)

	uri, _ := url.Parse("spiffe://cluster.local/ns/bench/sa/client")
	request, _ := fixtures.CSR("bench-client", nil, []*url.URL{uri})
	start := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				created, err := csrs.Create(ctx, &certificatesv1.CertificateSigningRequest{
					ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + strconv.Itoa(i)},
					Spec: certificatesv1.CertificateSigningRequestSpec{
						SignerName: signer, Request: request, ExpirationSeconds: ptr.To[int32](3600),
						Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth},
					},
				}, metav1.CreateOptions{})
				if err != nil {
					b.Error(err)
					continue
				}
				created.Status.Conditions = append(created.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
					Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Benchmark", Message: "approved by the benchmark",
				})
				if _, err := csrs.UpdateApproval(ctx, created.Name, created, metav1.UpdateOptions{}); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d certificates issued by %s within 5 minutes", issued.Load(), n, signer)
	}
	took := time.Since(start)
	_ = csrs.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.signerName=" + signer})
	return took
}

// startControllerManager runs kube-controller-manager with only its CSR signing
// controller, signing kubernetes.io/kube-apiserver-client with an ECDSA P-256 CA like
// trustsync's.
func startControllerManager(b *testing.B, cp *controlplane.ControlPlane, extra []string) *controlplane.Process {
	bin, err := controlplane.BinDir()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	ca := fixtures.CA("kube-controller-manager bench CA")
	kubeconfig := filepath.Join(dir, "kubeconfig")
	for path, data := range map[string][]byte{"ca.crt": ca.CertPEM(), "ca.key": ca.KeyPEM()} {
		if err := os.WriteFile(filepath.Join(dir, path), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	if err := controlplane.WriteKubeconfig(kubeconfig, cp.AdminConfig()); err != nil {
		b.Fatal(err)
	}
	p, err := controlplane.StartProcess("kube-controller-manager", filepath.Join(bin, "kube-controller-manager"), append([]string{
		"--kubeconfig=" + kubeconfig, "--controllers=csrsigning", "--leader-elect=false", "--secure-port=0",
		"--cluster-signing-kube-apiserver-client-cert-file=" + filepath.Join(dir, "ca.crt"),
		"--cluster-signing-kube-apiserver-client-key-file=" + filepath.Join(dir, "ca.key"),
	}, extra...), filepath.Join(dir, "kube-controller-manager.log"))
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// startBenchSigner runs a second trustsync-signer for a signer whose policy has no
// approval rules (the benchmark approves), in its own namespace.
func startBenchSigner(b *testing.B, cp *controlplane.ControlPlane, extra []string) *controlplane.Process {
	ctx := context.Background()
	if err := cp.CreateNamespace(ctx, "trustsync-bench", nil); err != nil {
		b.Fatal(err)
	}
	policy := filepath.Join(b.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("apiVersion: trustsync.io/v1alpha1\nkind: Policy\nsigners:\n- signerName: example.com/bench\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	p, err := startSigner(cp, append([]string{"--policy=" + policy, "--namespace=trustsync-bench", "-v=0"}, extra...)...)
	if err != nil {
		b.Fatal(err)
	}
	// Wait until it publishes its CA: it is signing from then on.
	waitForBundle(b, cp, "example.com:bench:live")
	return p
}

func waitForBundle(b testing.TB, cp *controlplane.ControlPlane, name string) {
	store := liveStore(b, cp, true)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if bundleObj, err := store.Get(context.Background(), name); err == nil {
			if pool := x509.NewCertPool(); pool.AppendCertsFromPEM([]byte(bundleObj.Spec.TrustBundle)) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Fatalf("bundle %s never published", name)
}

// BenchmarkSignerAPIServerCost measures what issuing certificates costs the API
// server: trustsync-signer at its default limits issues 300 certificates (each CSR
// created and approved by the benchmark, as a sidecar and an approver would), and the
// figures are per certificate: API requests (the create, the approval and the signer's
// status write), and kube-apiserver and etcd CPU time.
func BenchmarkSignerAPIServerCost(b *testing.B) {
	const n = 300
	cp := planes.Get(b, true)
	p := startBenchSigner(b, cp, nil)
	defer p.Stop(10 * time.Second)
	for i := 0; b.Loop(); i++ {
		before, err := cp.Usage(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		took := issueAll(b, cp, "example.com/bench", "cost-"+strconv.Itoa(i), n)
		after, err := cp.Usage(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		u := after.Sub(before)
		b.ReportMetric(float64(n)/took.Seconds(), "issued/s")
		b.ReportMetric(u.Requests/n, "requests/cert")
		b.ReportMetric(float64(u.APIServerCPU.Microseconds())/1000/n, "apiserver-cpu-ms/cert")
		b.ReportMetric(float64(u.EtcdCPU.Microseconds())/1000/n, "etcd-cpu-ms/cert")
	}
}
