package node

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/signer"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/doccmd"
	"github.com/trustsync/trustsync/test/keyscan"
	"github.com/trustsync/trustsync/test/poll"
	"github.com/trustsync/trustsync/test/scrape"
	"github.com/trustsync/trustsync/test/softhsm"
)

const (
	// softHSMDir is where docs/install.md keeps the SoftHSM2 token on the node.
	softHSMDir = "/var/lib/trustsync-softhsm"
	hsmSigner  = "trustsync.io/hsm"
)

// What a regulated platform runs, as docs/install.md teaches it, on the real node:
// first every component in FIPS 140-3 mode from the -fips images, where the node
// agent's delivery and the sidecar's certificate work as before and a JKS truststore
// is refused at admission; then, still in FIPS mode, a signer whose CA key is made in a
// SoftHSM2 token by the PKCS#11 signer's image: a pod's certificate comes from it, a
// forced rotation makes the next key in the token, and no Secret, ConfigMap or etcd
// key holds the private key of either CA (public keys compared). The release is rolled
// back afterwards, for the tests that follow.
func TestRegulated_FIPSModeThenACAKeyInAPKCS11TokenAsTheDocsTeach(t *testing.T) {
	n := installChart(t)
	ctx := context.Background()
	revision := releaseRevision(t, n)
	// Rolled back first, so that no signer of trustsync.io/hsm is left to write its CA
	// Secret and live bundle again; then they, the PIN and the token go.
	t.Cleanup(func() {
		rollBack(t, n, revision)
		ctx := context.Background()
		for _, name := range []string{"hsm-pin", "trustsync-ca-" + strings.ReplaceAll(hsmSigner, "/", "-")} {
			if err := n.Client.CoreV1().Secrets(releaseNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
		}
		if err := n.Client.CertificatesV1().ClusterTrustBundles().DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "spec.signerName=" + hsmSigner}); err != nil {
			t.Error(err)
		}
		_ = os.RemoveAll(softHSMDir)
	})

	runDocBlock(t, n, "**FIPS 140-3.**")
	fipsEverywhere(t, n)
	t.Run("the node agent's delivery", func(t *testing.T) { nodeDelivery(t, n, "fips-node-delivery") })
	t.Run("the sidecar's certificate", func(t *testing.T) {
		ns := sidecarIdentity(t, n, "fips-workload-cert")
		pod, err := n.Client.CoreV1().Pods(ns).Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The sidecar's binary is built with the module, whose default is FIPS mode.
		injected := 0
		for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
			if !strings.HasPrefix(c.Name, "trustsync") {
				continue
			}
			injected++
			if !strings.HasSuffix(c.Image, "-fips") {
				t.Errorf("the injected %s runs %s, want the -fips image", c.Name, c.Image)
			}
			if out, err := n.Exec(ctx, ns, "app", c.Name, "/trustsync-sidecar", "--version"); err != nil || !strings.Contains(out, "FIPS 140-3 mode: on") {
				t.Errorf("the injected %s says %q (%v), want FIPS 140-3 mode on", c.Name, out, err)
			}
		}
		if injected == 0 {
			t.Error("no sidecar was injected")
		}
	})
	t.Run("a JKS truststore is refused at admission", func(t *testing.T) {
		ns := n.Namespace(t, "fips-jks", restricted)
		pod := appPod("app", map[string]string{"trustsync.io/inject": "true", "trustsync.io/sources": bundlesJSON(t,
			map[string]any{"signerName": "trustsync.io/workload", "labelSelector": map[string]any{"matchLabels": map[string]string{liveLabel: "live"}}, "path": "truststore.jks", "format": "jks"})}, 1000, "exec sleep 3600")
		_, err := n.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "FIPS 140-3 mode cannot write a JKS truststore") {
			t.Fatalf("a JKS source in FIPS mode: %v; want it refused saying FIPS 140-3 mode cannot write it", err)
		}
	})
	if t.Failed() {
		return
	}

	// The token, made on the node with docs/signer.md's commands, then the chart's
	// PKCS#11 signer with docs/install.md's.
	if err := os.MkdirAll(softHSMDir, 0o755); err != nil {
		t.Fatal(err)
	}
	commands, err := doccmd.Block(filepath.Join(n.Root, "docs", "signer.md"), "Try it first with SoftHSM2")
	if err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("bash", "-euo", "pipefail", "-c", strings.Join(commands, "\n"))
	sh.Dir, sh.Env = softHSMDir, append(os.Environ(), "PIN="+softhsm.PIN, "SO_PIN="+softhsm.SOPIN)
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("docs/signer.md's SoftHSM2 commands in %s: %v\n%s", softHSMDir, err, out)
	}
	runDocBlock(t, n, "### CA keys in a PKCS#11 token")

	signers, err := n.Client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=signer"})
	if err != nil || len(signers.Items) == 0 {
		t.Fatalf("the signer's pods: %v", err)
	}
	for _, p := range signers.Items {
		if img := p.Spec.Containers[0].Image; !strings.Contains(img, "trustsync-signer-pkcs11:") || !strings.HasSuffix(img, "-fips") {
			t.Errorf("signer pod %s runs %s, want the PKCS#11 signer's FIPS image", p.Name, img)
		}
	}

	caSecret := func() *corev1.Secret {
		s, err := n.Client.CoreV1().Secrets(releaseNamespace).Get(ctx, "trustsync-ca-"+strings.ReplaceAll(hsmSigner, "/", "-"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var ca *x509.Certificate
	poll.Eventually(t, time.Minute, "the token's CA published", func() (bool, string) {
		s, err := n.Client.CoreV1().Secrets(releaseNamespace).Get(ctx, "trustsync-ca-"+strings.ReplaceAll(hsmSigner, "/", "-"), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if s.Type != signer.SecretTypeKeeperCA || len(s.Data[corev1.TLSPrivateKeyKey]) != 0 || !strings.HasPrefix(s.Annotations[signer.AnnotationKey], "pkcs11:") {
			return false, "type " + string(s.Type) + ", key at " + s.Annotations[signer.AnnotationKey]
		}
		ca = firstCert(t, s.Data[corev1.TLSCertKey])
		return true, ""
	})

	// A pod's certificate from the token's CA.
	ns := n.Namespace(t, "hsm-pod-certificate", restricted)
	pod := podCertificatePod("app", nil)
	pod.Spec.Volumes[0].Projected.Sources[0].PodCertificate.SignerName = hsmSigner
	createPod(t, ns, pod)
	n.WaitPod(t, ns, "app", 2*time.Minute, "Ready", cluster.PodReady)
	credentials, err := n.Exec(ctx, ns, "app", "app", "cat", identityPath+"/credentials.pem")
	if err != nil {
		t.Fatalf("the app cannot read its credential bundle: %v", err)
	}
	leaf := leafOf(t, credentials)
	if err := leaf.CheckSignatureFrom(ca); err != nil {
		t.Errorf("the pod's certificate is not signed by the token's CA: %v", err)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://hsm.cluster.local/ns/"+ns+"/sa/default" {
		t.Errorf("the pod's certificate names %v, want its ServiceAccount in trust domain hsm.cluster.local", leaf.URIs)
	}

	// A forced rotation makes the next CA's key in the token.
	s := caSecret()
	s.Annotations[signer.AnnotationRotateRequested] = time.Now().UTC().Format(time.RFC3339Nano)
	if _, err := n.Client.CoreV1().Secrets(releaseNamespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var next *x509.Certificate
	poll.Eventually(t, time.Minute, "the next CA's key recorded", func() (bool, string) {
		s := caSecret()
		if !strings.HasPrefix(s.Annotations[signer.AnnotationNextKey], "pkcs11:") {
			return false, "next key " + s.Annotations[signer.AnnotationNextKey]
		}
		next = firstCert(t, s.Data["next.crt"])
		return true, ""
	})

	// Read through the token itself, as an auditor would: both keys are there,
	// sensitive and never extractable.
	tok, err := softhsm.At(softHSMDir, "trustsync")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOFTHSM2_CONF", tok.Conf)
	keys, err := tok.Keys()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []*x509.Certificate{ca, next} {
		held := false
		for _, k := range keys {
			if keyscan.EqualKeys(k.Public, want.PublicKey) {
				held = k.Sensitive && !k.Extractable
			}
		}
		if !held {
			t.Errorf("the token holds no sensitive, non-extractable key for CA %q: %+v", want.Subject, keys)
		}
	}
	etcd, err := n.EtcdURL()
	if err != nil {
		t.Fatal(err)
	}
	storage, err := keyscan.Storage(ctx, n.Client, etcd)
	if err != nil {
		t.Fatal(err)
	}
	for _, found := range keyscan.Holding(storage, []*x509.Certificate{ca, next}) {
		t.Error(found)
	}
}

// runDocBlock runs, command by command as written, the sh block after marker in
// docs/install.md.
func runDocBlock(t *testing.T, n *cluster.Node, marker string) {
	t.Helper()
	commands, err := doccmd.Block(filepath.Join(n.Root, "docs", "install.md"), marker)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	for _, c := range commands {
		if _, err := n.Shell(ctx, c); err != nil {
			t.Fatalf("docs/install.md after %q: %v", marker, err)
		}
	}
}

// fipsEverywhere checks every trustsync pod: its containers run a -fips image with
// GODEBUG=fips140=on, and its process says FIPS mode is on in trustsync_build_info.
func fipsEverywhere(t *testing.T, n *cluster.Node) {
	t.Helper()
	ctx := context.Background()
	poll.Eventually(t, 2*time.Minute, "every trustsync pod in FIPS mode", func() (bool, string) {
		pods, err := n.Client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=trustsync"})
		if err != nil {
			return false, err.Error()
		}
		scraped := map[string]bool{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue // helm test's pod, kept for its logs: not a component
			}
			if p.DeletionTimestamp != nil {
				return false, p.Name + " is terminating"
			}
			for _, c := range p.Spec.Containers {
				if !strings.HasSuffix(c.Image, "-fips") || !hasEnv(c.Env, "GODEBUG", "fips140=on") {
					return false, p.Name + " runs " + c.Image
				}
				for _, port := range c.Ports {
					if port.Name != "health" {
						continue
					}
					text, err := n.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces", releaseNamespace, "pods",
						p.Name+":"+strconv.Itoa(int(port.ContainerPort)), "proxy", "metrics").DoRaw(ctx)
					if err != nil {
						return false, p.Name + ": " + err.Error()
					}
					m, err := scrape.Parse(string(text))
					if err != nil {
						return false, err.Error()
					}
					if m.Sum("trustsync_build_info", map[string]string{"fips": "on"}) != 1 {
						return false, p.Name + " does not say fips=\"on\" in trustsync_build_info"
					}
					scraped[p.Labels["app.kubernetes.io/component"]] = true
				}
			}
		}
		return len(scraped) == 4, "FIPS mode seen in " + strings.Join(slices.Sorted(maps.Keys(scraped)), ", ")
	})
}

func hasEnv(env []corev1.EnvVar, name, value string) bool {
	for _, e := range env {
		if e.Name == name && e.Value == value {
			return true
		}
	}
	return false
}

func firstCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	certs, err := bundle.ParseCertificates(data)
	if err != nil || len(certs) == 0 {
		t.Fatalf("no certificate in %q: %v", data, err)
	}
	return certs[0]
}

// releaseRevision is the installed release's revision.
func releaseRevision(t *testing.T, n *cluster.Node) int {
	t.Helper()
	out, err := n.Run(context.Background(), "helm", "status", release, "-n", releaseNamespace, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var status struct{ Version int }
	if err := json.Unmarshal([]byte(out), &status); err != nil || status.Version == 0 {
		t.Fatalf("helm status: %v\n%s", err, out)
	}
	return status.Version
}

// rollBack returns the release to revision, waiting for it to roll out.
func rollBack(t *testing.T, n *cluster.Node, revision int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := n.Run(ctx, "helm", "rollback", release, strconv.Itoa(revision), "-n", releaseNamespace, "--wait", "--timeout", "3m"); err != nil {
		t.Errorf("helm rollback to %d: %v", revision, err)
	}
}
