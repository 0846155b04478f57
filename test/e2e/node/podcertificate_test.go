package node

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/trustsync/trustsync/test/cluster"
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
// the node and measures, from the first create, the time until every one of their
// PodCertificateRequests is issued, and the issued requests per second over that span:
// the kubelet asks, trustsync-signer (as the chart installs it) signs.
func BenchmarkPodCertificates_Burst(b *testing.B) {
	for _, pods := range []int{30, 90} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) { benchPodCertificateBurst(b, pods) })
	}
}

func benchPodCertificateBurst(b *testing.B, pods int) {
	n := installChart(b)
	var spans []time.Duration
	for i := 0; b.Loop(); i++ {
		ns := n.Namespace(b, fmt.Sprintf("pod-certificate-burst-%d-%d", pods, i), restricted)
		start := time.Now()
		for p := range pods {
			createPod(b, ns, podCertificatePod(fmt.Sprintf("app-%d", p), nil))
		}
		var issued int
		var firstIssue, lastIssue time.Time
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			list, err := n.Client.CertificatesV1().PodCertificateRequests(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			issued, firstIssue, lastIssue = 0, time.Time{}, time.Time{}
			for _, pcr := range list.Items {
				for _, c := range pcr.Status.Conditions {
					if c.Type != "Issued" {
						continue
					}
					issued++
					if at := c.LastTransitionTime.Time; firstIssue.IsZero() || at.Before(firstIssue) {
						firstIssue = at
					}
					if at := c.LastTransitionTime.Time; at.After(lastIssue) {
						lastIssue = at
					}
				}
			}
			return issued >= pods, nil
		})
		if err != nil {
			b.Fatalf("%d of %d pod certificates issued within 5 minutes", issued, pods)
		}
		// Condition times have one-second resolution; the span is measured from the
		// first create to the moment all were seen issued.
		took := time.Since(start)
		spans = append(spans, took)
		b.Logf("%d pods: all %d certificates issued %.1fs after the first create (first issued %s, last %s)", pods, issued, took.Seconds(), firstIssue.Format(time.TimeOnly), lastIssue.Format(time.TimeOnly))
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
}

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

	secrets := n.Client.CoreV1().Secrets(releaseNamespace)
	caSecret, err := secrets.Get(ctx, "trustsync-ca-trustsync.io-workload", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if caSecret.Annotations == nil {
		caSecret.Annotations = map[string]string{}
	}
	caSecret.Annotations["trustsync.io/rotate-requested-at"] = time.Now().UTC().Format(time.RFC3339)
	if _, err := secrets.Update(ctx, caSecret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
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
