// Package demo shows trustsync's whole loop on a local control plane, narrated: it is
// what `make demo` runs (TestDemo, with TRUSTSYNC_DEMO=1; `go test ./...` skips it). It starts etcd and kube-apiserver, runs the signer and the
// webhook (registered with the API server), creates a bundle and an annotated pod,
// shows the injected spec, runs the pod's sidecar as a local process, shows the trust
// file, forces a CA rotation and shows the file follow it within seconds, and verifies
// the pod's workload certificate against the trust file. It exits non-zero if any step
// fails, and cleans up either way.
package demo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/controlplane"
)

func TestDemo(t *testing.T) {
	if os.Getenv("TRUSTSYNC_DEMO") == "" {
		t.Skip("the demo runs with `make demo`")
	}
	run(t)
}

func say(format string, args ...any)  { fmt.Printf("\n==> "+format+"\n", args...) }
func show(format string, args ...any) { fmt.Printf("    "+format+"\n", args...) }

func run(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	say("Starting a local control plane: etcd and kube-apiserver v1.37.1, on loopback")
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	show("API server at %s, serving certificates.k8s.io/v1 ClusterTrustBundles", cp.Host)

	say("Starting trustsync-signer (trustsync.io/workload, a 5-second CA propagation window for the demo)")
	if err := cp.CreateNamespace(ctx, "trustsync-system", nil); err != nil {
		t.Fatal(err)
	}
	signer, err := cp.StartSigner("--namespace=trustsync-system", "--signer-name=trustsync.io/workload", "--ca-propagation-window=5s")
	if err != nil {
		t.Fatal(err)
	}
	defer signer.Stop(10 * time.Second)
	d := newDemo(t, cp)
	live := d.waitForBundle(ctx, "trustsync.io:workload:live", 1)
	show("the signer generated its CA and published it as ClusterTrustBundle trustsync.io:workload:live:")
	showAnchors(live)

	say("Starting trustsync-webhook, registered through the chart's own webhook configurations")
	webhook, err := cp.StartWebhook(ctx, "policy:\n  signers:\n  - signerName: trustsync.io/workload\n    approval: {trustDomain: cluster.local}\n")
	if err != nil {
		t.Fatal(err)
	}
	defer webhook.Stop()
	show("serving %s; every pod annotated trustsync.io/inject is sent to /mutate/pods", webhook.URL(""))

	say("Publishing a corporate root CA as ClusterTrustBundle corp-root")
	d.createCorpRoot(ctx)

	say("Creating pod demo/web, annotated to trust the signer and the corporate root, and to get a certificate")
	pod := d.createPod(ctx)
	sidecar := pod.Spec.InitContainers[0]
	out, _ := yaml.Marshal(sidecar)
	show("the webhook injected a native sidecar (an init container with restartPolicy: Always):")
	fmt.Println(indent(string(out), "      "))
	show("and the volume %q, mounted read-only into %q at /var/run/trust-anchors", pod.Spec.Volumes[len(pod.Spec.Volumes)-2].Name, pod.Spec.Containers[0].Name)

	say("Running the pod's sidecar as a local process, with the injected flags and the pod's ServiceAccount")
	start := time.Now()
	s := d.runSidecar(pod)
	trust := s.WaitForContent(t, "ca_certificates.pem")
	s.WaitForContent(t, "tls.crt")
	show("trust file and certificate written in %s:", time.Since(start).Round(time.Millisecond))
	show("%s/ca_certificates.pem:", s.Dir)
	showAnchors(string(trust))

	say("Verifying the pod's workload certificate against the trust file")
	leaf := d.verify(s)
	show("verified: %s, issued by %q, valid until %s", leaf.URIs[0], leaf.Issuer.CommonName, leaf.NotAfter.Format(time.RFC3339))

	say("Forcing a CA rotation (annotating the signer's CA Secret trustsync.io/rotate-requested-at)")
	requested := time.Now()
	d.rotate(ctx)
	d.waitForFile(s, 3)
	show("%s after the request, the trust file holds the old and the new CA, before the new one signs anything:", time.Since(requested).Round(time.Millisecond))
	rotated, _ := s.Read("ca_certificates.pem")
	showAnchors(string(rotated))
	d.verify(s)
	show("the certificate issued by the old CA still verifies against it")

	say("Done: cleaning up (sidecar, webhook, signer, kube-apiserver, etcd)")
	s.Process.Stop(5 * time.Second)
}

// showAnchors prints each certificate of a PEM bundle: subject, expiry, fingerprint.
func showAnchors(pemText string) {
	certs, err := bundle.ParseCertificates([]byte(pemText))
	if err != nil {
		show("(unparsable: %v)", err)
		return
	}
	for _, c := range certs {
		sum := sha256.Sum256(c.Raw)
		show("  - %-45s until %s  sha256 %s…", c.Subject.String(), c.NotAfter.Format("2006-01-02"), hex.EncodeToString(sum[:])[:16])
	}
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}

// poll waits for cond, failing the demo after a minute.
func poll(t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
