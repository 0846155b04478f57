package node

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"github.com/trustsync/trustsync/cmd/kubectl-trustsync/plugin"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/poll"
	"github.com/trustsync/trustsync/test/scrape"
)

const identityPath = "/var/run/identity"

// podCertificatePod is an app pod with a plain podCertificate projected volume naming
// trustsync's signer: no trustsync annotation, no sidecar; the kubelet asks, the
// signer issues.
func podCertificatePod(name string, userAnnotations map[string]string) *corev1.Pod {
	pod := appPod(name, nil, 1000, "exec sleep 3600")
	pod.Spec.Volumes = []corev1.Volume{{Name: "identity", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{PodCertificate: &corev1.PodCertificateProjection{
			SignerName: "trustsync.io/workload", KeyType: "ECDSAP256", CredentialBundlePath: "credentials.pem", UserAnnotations: userAnnotations,
		}}},
	}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "identity", MountPath: identityPath, ReadOnly: true}}
	return pod
}

// A pod with a plain podCertificate volume starts: its credential bundle, as the app
// reads it, holds a key and a certificate for that key, carrying the pod's
// ServiceAccount's SPIFFE ID, living the policy's default lifetime, and verifying
// against the signer's published live bundle.
func TestPod_PlainPodCertificateVolumeIsIssuedByTheSigner(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "pod-certificate", restricted)
	createPod(t, ns, podCertificatePod("app", map[string]string{"trustsync.io/dns-names": "app." + ns + ".svc"}))
	n.WaitPod(t, ns, "app", 2*time.Minute, "Ready", cluster.PodReady)

	bundle, err := n.Exec(context.Background(), ns, "app", "app", "cat", identityPath+"/credentials.pem")
	if err != nil {
		t.Fatalf("the app cannot read its credential bundle: %v", err)
	}
	var key crypto.Signer
	var chain []*x509.Certificate
	for rest := []byte(bundle); ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		switch block.Type {
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			key = k.(crypto.Signer)
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			chain = append(chain, c)
		}
	}
	if key == nil || len(chain) == 0 {
		t.Fatalf("the credential bundle holds no key or no certificate:\n%s", bundle)
	}
	leaf := chain[0]
	if !key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(leaf.PublicKey) {
		t.Error("the certificate is not for the key beside it")
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://cluster.local/ns/"+ns+"/sa/default" || strings.Join(leaf.DNSNames, ",") != "app."+ns+".svc" {
		t.Errorf("URIs %v, DNS names %v; want the pod's ServiceAccount SPIFFE ID and app.%s.svc", leaf.URIs, leaf.DNSNames, ns)
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got != 24*time.Hour {
		t.Errorf("lifetime %s, want the policy's default 24h", got)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(liveAnchors(t)))
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the certificate does not verify against the signer's live bundle: %v", err)
	}
}

// A request outside the policy is denied with the reason, and the pod's Events say
// so; the pod does not start. The key-type case narrows the policy's keyTypes with
// `helm upgrade`, as an operator would, and puts it back.
func TestPod_PodCertificateOutsideThePolicyIsDeniedAndThePodsEventsSayWhy(t *testing.T) {
	n := installChart(t)
	for _, tc := range []struct {
		name, keyType string
		annotations   map[string]string
		keyTypes      string // the policy's signers with narrowed keyTypes, set for the case
		want          []string
	}{
		{name: "dns", keyType: "ECDSAP256", annotations: map[string]string{"trustsync.io/dns-names": "app.other.svc"},
			want: []string{"InvalidUnverifiedUserAnnotations", "app.other.svc", "matches none of the patterns"}},
		{name: "key-type", keyType: "ED25519", keyTypes: `[{"signerName":"trustsync.io/workload","trustDomain":"cluster.local","approval":{},"keyTypes":["ECDSAP256","ECDSAP384"]}]`,
			want: []string{"UnsupportedKeyType", "key type ED25519 is not one signer trustsync.io/workload issues for", "use one of keyType ECDSAP256, ECDSAP384"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.keyTypes != "" {
				upgradeChart(t, n, "--set-json", "policy.signers="+tc.keyTypes)
				t.Cleanup(func() { upgradeChart(t, n, "--reset-values") })
			}
			ns := n.Namespace(t, "pod-certificate-denied-"+tc.name, restricted)
			spec := podCertificatePod("app", tc.annotations)
			spec.Spec.Volumes[0].Projected.Sources[0].PodCertificate.KeyType = tc.keyType
			pod := createPod(t, ns, spec)
			var seen []string
			err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				events, err := n.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(pod.UID)})
				if err != nil {
					return false, nil
				}
				seen = seen[:0]
				for _, e := range events.Items {
					seen = append(seen, e.Reason+": "+e.Message)
					if e.Reason == "Denied" && containsAll(e.Message, tc.want) {
						return true, nil
					}
				}
				return false, nil
			})
			if err != nil {
				t.Fatalf("no Denied event saying %q on the pod within 2 minutes; its events:\n%s", tc.want, strings.Join(seen, "\n"))
			}
			got, err := n.Client.CoreV1().Pods(ns).Get(context.Background(), "app", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if cluster.PodReady(got) {
				t.Error("the pod started without its certificate")
			}
		})
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// upgradeChart upgrades the installed release with args (--set and friends, reusing
// the other values; or --reset-values, back to the defaults it was installed with)
// and waits until it is rolled out.
func upgradeChart(t *testing.T, n *cluster.Node, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if len(args) > 0 && args[0] != "--reset-values" {
		args = append([]string{"--reuse-values"}, args...)
	} else {
		args = append(args, n.ChartValues()...) // the defaults this node's install set
	}
	cmd := append([]string{"upgrade", release, "charts/trustsync", "-n", releaseNamespace, "--wait", "--timeout", "3m"}, args...)
	if _, err := n.Run(ctx, "helm", cmd...); err != nil {
		t.Fatalf("helm upgrade %v: %v", args, err)
	}
}

// BenchmarkPodCertificates_Burst creates N pods with podCertificate volumes at once on
// the node: the kubelet asks, trustsync-signer (as the chart installs it) signs. It
// measures the whole, from the first create until every PodCertificateRequest is
// issued, and apart from it the signer's own share: from the kubelet's last request to
// the last certificate, and each request's time from created to issued, as the
// benchmark's own watch sees them (p50, p99) and as the signer's
// trustsync_signer_request_duration_seconds says (the bucket bound holding p99).
func BenchmarkPodCertificates_Burst(b *testing.B) {
	for _, pods := range []int{30, 90} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) { benchPodCertificateBurst(b, pods) })
	}
}

func benchPodCertificateBurst(b *testing.B, pods int) {
	n := installChart(b)
	var spans, tails, watched50, watched99 []time.Duration
	var own99 []float64
	labels := map[string]string{"kind": "PodCertificateRequest"}
	for i := 0; b.Loop(); i++ {
		ns := n.Namespace(b, fmt.Sprintf("pod-certificate-burst-%d-%d", pods, i), restricted)
		requests := watchPodCertificateRequests(b, n, ns)
		before := signerHistogram(b, n, "trustsync_signer_request_duration_seconds", labels)
		start := time.Now()
		for p := range pods {
			createPod(b, ns, podCertificatePod(fmt.Sprintf("app-%d", p), nil))
		}
		poll.True(b, 5*time.Minute, fmt.Sprintf("all %d pod certificates issued", pods), func() bool { return requests.issuedCount() >= pods })
		own := signerHistogram(b, n, "trustsync_signer_request_duration_seconds", labels).Since(before)

		lastCreated, lastIssued, each := requests.times()
		spans = append(spans, lastIssued.Sub(start))
		tails = append(tails, lastIssued.Sub(lastCreated))
		watched50, watched99 = append(watched50, quantile(each, 0.5)), append(watched99, quantile(each, 0.99))
		own99 = append(own99, own.Quantile(0.99))
		b.Logf("%d pods: all issued %.2fs after the first create, %.0f ms after the kubelet's last request; each request created to issued p50 %.1f ms, p99 %.1f ms (watched); the signer's own p99 within %v s (%d observed)",
			pods, spans[i].Seconds(), ms(tails[i]), ms(watched50[i]), ms(watched99[i]), own99[i], own.Count())
		// The node holds at most 110 pods: clear this burst before the next.
		b.StopTimer()
		if err := n.Client.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			b.Fatal(err)
		}
		waitNoPods(b, n, ns)
		b.StartTimer()
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(spans).Seconds(), "s-to-all-issued")
	b.ReportMetric(float64(pods)/median(spans).Seconds(), "issued/s")
	b.ReportMetric(ms(median(tails)), "ms-last-request-to-all-issued")
	b.ReportMetric(ms(median(watched50)), "ms-request-p50")
	b.ReportMetric(ms(median(watched99)), "ms-request-p99")
	slices.Sort(own99)
	b.ReportMetric(own99[len(own99)/2]*1000, "ms-signer-p99-bound")
}

// podCertificateRequests is when a watch of one namespace saw each request created
// and each issued.
type podCertificateRequests struct {
	mu      sync.Mutex
	created map[string]time.Time
	issued  map[string]time.Time
}

// watchPodCertificateRequests watches ns's PodCertificateRequests until the benchmark
// ends, noting when each was first seen and first seen Issued.
func watchPodCertificateRequests(b *testing.B, n *cluster.Node, ns string) *podCertificateRequests {
	r := &podCertificateRequests{created: map[string]time.Time{}, issued: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	informer := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(n.Client.CertificatesV1().RESTClient(), "podcertificaterequests", ns, fields.Everything()),
		&certificatesv1.PodCertificateRequest{}, 0, cache.Indexers{})
	note := func(obj any) {
		pcr, ok := obj.(*certificatesv1.PodCertificateRequest)
		if !ok {
			return
		}
		now := time.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, ok := r.created[pcr.Name]; !ok {
			r.created[pcr.Name] = now
		}
		if _, ok := r.issued[pcr.Name]; !ok && slices.ContainsFunc(pcr.Status.Conditions, func(c metav1.Condition) bool {
			return c.Type == certificatesv1.PodCertificateRequestConditionTypeIssued
		}) {
			r.issued[pcr.Name] = now
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: note, UpdateFunc: func(_, o any) { note(o) }}); err != nil {
		b.Fatal(err)
	}
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		b.Fatal("the watch of PodCertificateRequests never synced")
	}
	return r
}

func (r *podCertificateRequests) issuedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.issued)
}

// times is when the last request was created and the last issued, and each issued
// request's time from one to the other.
func (r *podCertificateRequests) times() (lastCreated, lastIssued time.Time, each []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, at := range r.issued {
		created := r.created[name]
		each = append(each, at.Sub(created))
		if created.After(lastCreated) {
			lastCreated = created
		}
		if at.After(lastIssued) {
			lastIssued = at
		}
	}
	return lastCreated, lastIssued, each
}

// signerHistogram is the signer replicas' histogram name, summed over the replicas
// (only the leader signs), scraped through the API server's pod proxy.
func signerHistogram(b *testing.B, n *cluster.Node, name string, labels map[string]string) scrape.Histogram {
	ctx := context.Background()
	signers, err := n.Client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=signer"})
	if err != nil || len(signers.Items) == 0 {
		b.Fatalf("the signer's pods: %v", err)
	}
	sum := scrape.Histogram{}
	for _, pod := range signers.Items {
		text, err := n.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces", releaseNamespace, "pods", pod.Name+":8081", "proxy", "metrics").DoRaw(ctx)
		if err != nil {
			b.Fatalf("the metrics of signer pod %s: %v", pod.Name, err)
		}
		m, err := scrape.Parse(string(text))
		if err != nil {
			b.Fatal(err)
		}
		sum = sum.Plus(m.Histogram(name, labels))
	}
	return sum
}

// quantile is the q-quantile of ds by rank.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// The same pod, asking with trustsync's annotations in delivery native: it runs with
// no sidecar, and finds the same files at the same paths: the bundle as
// ca_certificates.pem, and tls.key and tls.crt owned by its uid, the certificate
// verifying against the live bundle it also reads.
func TestPod_DeliveryNativeGivesTheSameFilesWithoutASidecar(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "delivery-native", restricted)
	pod := createPod(t, ns, appPod("app", map[string]string{
		"trustsync.io/inject":         "true",
		"trustsync.io/delivery":       "native",
		"trustsync.io/signer-name":    "trustsync.io/workload",
		"trustsync.io/label-selector": liveLabel + "=live",
		"trustsync.io/certificate":    "true",
	}, 1000, "exec sleep 3600"))
	if len(pod.Spec.InitContainers) != 0 || len(pod.Spec.Containers) != 1 {
		t.Fatalf("delivery native added containers: init %d, app %d", len(pod.Spec.InitContainers), len(pod.Spec.Containers))
	}
	n.WaitPod(t, ns, "app", 2*time.Minute, "Ready", cluster.PodReady)

	ctx := context.Background()
	read := func(file string) string {
		t.Helper()
		out, err := n.Exec(ctx, ns, "app", "app", "cat", mountPath+"/"+file)
		if err != nil {
			t.Fatalf("the app (uid 1000) cannot read %s: %v", file, err)
		}
		return out
	}
	trust, crt := read("ca_certificates.pem"), read("tls.crt")
	if b, _ := pem.Decode([]byte(read("tls.key"))); b == nil || !strings.Contains(b.Type, "PRIVATE KEY") {
		t.Fatal("tls.key as the app reads it is no private key")
	}
	if got, want := strings.Join(anchorSet(t, trust), ","), strings.Join(anchorSet(t, liveAnchors(t)), ","); got != want {
		t.Errorf("ca_certificates.pem holds %s, want the live bundle's %s", got, want)
	}
	assertIdentity(t, crt, trust, ns)
}

// The signer's CA rotates while pods run: a pod's trust file, kept by its sidecar,
// takes the new CA before it signs anything, and a pod certificate issued after the
// rotation (by the new CA) verifies against that trust file as the app reads it.
func TestPod_PodCertificatesIssuedAfterACARotationVerifyAgainstTheTrustFile(t *testing.T) {
	n := installChart(t)
	// A short propagation window, as the demo uses, so the new CA signs within the test;
	// put back afterwards.
	upgradeChart(t, n, "--set", "signer.caPropagationWindow=5s")
	t.Cleanup(func() { upgradeChart(t, n, "--reset-values") })

	ns := n.Namespace(t, "pod-certificate-rotation", restricted)
	createPod(t, ns, appPod("trust", map[string]string{
		"trustsync.io/inject": "true", "trustsync.io/signer-name": "trustsync.io/workload", "trustsync.io/label-selector": liveLabel + "=live",
	}, 1000, "exec sleep 3600"))
	n.WaitPod(t, ns, "trust", 2*time.Minute, "Ready", cluster.PodReady)
	ctx := context.Background()
	trustFile := func() string {
		out, err := n.Exec(ctx, ns, "trust", "app", "cat", mountPath+"/ca_certificates.pem")
		if err != nil {
			return ""
		}
		return out
	}
	before := anchorSet(t, trustFile())

	// As an operator would: rotate, and wait until the new CA signs (the window is 5 s).
	out, err := n.Run(ctx, "kubectl", "trustsync", "rotate", "trustsync.io/workload", "--wait", "2m")
	if err != nil || !strings.Contains(out, "signs now") {
		t.Fatalf("kubectl trustsync rotate --wait: %v\n%s", err, out)
	}
	var r plugin.Rotation
	if code := kubectlTrustsync(t, n, &r, "rotation", "trustsync.io/workload"); r.Phase != "Stable" || code != 0 {
		t.Errorf("after rotate --wait, rotation says phase %s with exit %d, want Stable and 0", r.Phase, code)
	}
	var trust string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		trust = trustFile()
		return len(anchorSet(t, trust)) > len(before), nil
	}); err != nil {
		t.Fatalf("the trust file did not take the new CA within 2 minutes; it holds:\n%s", trust)
	}

	// Pods created from now on are issued by the new CA once its window has passed.
	var leaf *x509.Certificate
	for i := 0; ; i++ {
		name := fmt.Sprintf("app-%d", i)
		createPod(t, ns, podCertificatePod(name, nil))
		n.WaitPod(t, ns, name, 2*time.Minute, "Ready", cluster.PodReady)
		bundle, err := n.Exec(ctx, ns, name, "app", "cat", identityPath+"/credentials.pem")
		if err != nil {
			t.Fatal(err)
		}
		leaf = leafOf(t, bundle)
		if !slices.Contains(before, fmt.Sprintf("%x", sha256.Sum256(issuerOf(t, leaf, trust)))) {
			t.Logf("pod %s, created %d after the trust file took the new CA, has a certificate from it", name, i+1)
			break
		}
		if i == 10 {
			t.Fatal("ten pods after the rotation, every certificate still comes from the old CA")
		}
		time.Sleep(3 * time.Second)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(trust))
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("a certificate issued by the new CA does not verify against the trust file the other pod reads: %v", err)
	}
}

// leafOf is the first CERTIFICATE block of a credential bundle: the leaf.
func leafOf(t *testing.T, bundle string) *x509.Certificate {
	t.Helper()
	for rest := []byte(bundle); ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			t.Fatalf("no certificate in the credential bundle:\n%s", bundle)
		}
		if block.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
}

// issuerOf returns the DER of the anchor in trust that signed leaf.
func issuerOf(t *testing.T, leaf *x509.Certificate, trust string) []byte {
	t.Helper()
	for rest := []byte(trust); ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			t.Fatalf("no anchor of the trust file signed the certificate (issuer %s)", leaf.Issuer)
		}
		ca, err := x509.ParseCertificate(block.Bytes)
		if err == nil && leaf.CheckSignatureFrom(ca) == nil {
			return block.Bytes
		}
	}
}

// The kubelet refreshes a pod's certificate and the app sees the new one in its file.
// A restarted kubelet refreshes every podCertificate volume at once (it keeps no
// state across restarts), which shows the refresh path in seconds; the timer path
// (beginRefreshAt, at least 10 minutes after issue plus up to 5 minutes of the
// kubelet's jitter) is the same request and the same signer.
func TestPod_RefreshedPodCertificateIsWhatTheAppSees(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "pod-certificate-refresh", restricted)
	createPod(t, ns, podCertificatePod("app", nil))
	n.WaitPod(t, ns, "app", 2*time.Minute, "Ready", cluster.PodReady)
	ctx := context.Background()
	serial := func() string {
		out, err := n.Exec(ctx, ns, "app", "app", "cat", identityPath+"/credentials.pem")
		if err != nil {
			return ""
		}
		return leafOf(t, out).SerialNumber.String()
	}
	first := serial()
	if first == "" {
		t.Fatal("the app cannot read its credential bundle")
	}
	if err := n.RestartKubelet(); err != nil {
		t.Fatalf("restart the kubelet: %v", err)
	}
	var now string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		now = serial()
		return now != "" && now != first, nil
	}); err != nil {
		t.Fatalf("the app still reads certificate %s 3 minutes after the kubelet restarted", first)
	}
	pcrs, err := n.Client.CertificatesV1().PodCertificateRequests(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pcrs.Items) < 2 {
		t.Errorf("%d PodCertificateRequests in the namespace; the refresh should have made a second", len(pcrs.Items))
	}
	n.WaitPod(t, ns, "app", 2*time.Minute, "Ready", cluster.PodReady)
}
