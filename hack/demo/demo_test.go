// Package demo shows trustsync's whole loop on a real one-node cluster, narrated: it is
// what `make demo` runs (TestDemo, with TRUSTSYNC_DEMO=1; `go test ./...` skips it). It
// starts the node (hack/cluster.sh up), installs the chart with helm as a user would,
// publishes a bundle, creates an annotated pod, shows what the webhook injected, reads
// the trust file and the workload certificate from inside the running app container;
// beside it a node-delivery pod with no added container and a hand-written native
// projection, which kubectl trustsync status and who-trusts answer for; then forces a
// CA rotation that visibly waits for the pod that has not caught up (the kubelet's
// projection) before the new CA signs, while the app's file and a TrustTarget's
// ConfigMap follow within seconds. Between the two, a second cluster's signer serves its
// SPIFFE bundle endpoint and a pod here trusts what it issues, through a
// FederatedTrustDomain. It exits non-zero if any step fails, and stops the
// node either way (hack/cluster.sh down).
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

	corev1 "k8s.io/api/core/v1"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/poll"
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
	began := time.Now()

	say("Starting a one-node cluster (hack/cluster.sh up): etcd, kube-apiserver, kube-controller-manager,")
	show("kube-scheduler, containerd and a kubelet v1.37.1, with trustsync's image built from this tree")
	start := time.Now()
	node, err := cluster.StartNode()
	if node != nil {
		defer func() {
			say("Done in %s: stopping the cluster (hack/cluster.sh down)", time.Since(began).Round(time.Second))
			if err := node.Stop(); err != nil {
				t.Error(err)
			}
		}()
	}
	if err != nil {
		t.Fatal(err)
	}
	show("node %s Ready in %s", cluster.NodeName, time.Since(start).Round(100*time.Millisecond))
	d := &demo{t: t, node: node}

	say("Installing the chart as a user would (a rotation waits at most %s for every pod, for the demo)", maxWait)
	show("$ helm install trustsync charts/trustsync -n trustsync-system --create-namespace \\")
	show("      --set signer.caPropagationMaxWait=%s --wait \\", maxWait)
	show("      --set agent.kubeletDir=... --set agent.dataDir=...   # this kubelet's --root-dir")
	start = time.Now()
	d.run(ctx, "helm", append([]string{"install", "trustsync", "charts/trustsync", "-n", "trustsync-system", "--create-namespace",
		"--set", "signer.caPropagationMaxWait=" + maxWait, "--set", "agent.reports.interval=500ms", "--wait", "--timeout", "3m"}, node.ChartValues()...)...)
	show("installed in %s:", time.Since(start).Round(100*time.Millisecond))
	d.kubectl(ctx, "get", "pods", "-n", "trustsync-system")
	live := d.liveBundle(ctx, 1)
	show("the signer generated its CA and published it as ClusterTrustBundle %s:", liveBundle)
	showAnchors(live)

	say("Publishing a corporate root CA as ClusterTrustBundle corp-root")
	d.createCorpRoot(ctx)

	say("Creating pod demo/web (Pod Security: restricted), annotated to trust the signer and the")
	show("corporate root and to get a certificate; its app's first act is to read $SSL_CERT_FILE")
	pod := d.createPod(ctx)
	show("the webhook injected a native sidecar (an init container with restartPolicy: Always):")
	sidecar := pod.Spec.InitContainers[0]
	show("  %s  image %s", sidecar.Name, sidecar.Image)
	for _, a := range sidecar.Args {
		show("    %s", a)
	}
	show("and the volume %q, mounted read-only into %q at %s", anchorsVolume, pod.Spec.Containers[0].Name, mountPath)

	start = time.Now()
	d.waitReady(ctx)
	show("running and Ready %s after creation:", time.Since(start).Round(100*time.Millisecond))
	d.kubectl(ctx, "get", "pod", "-n", namespace, "web")
	first := d.firstRead(ctx)
	show("the app's first read of %s/ca_certificates.pem found all %d anchors:", mountPath, first)
	show("the sidecar had written the complete file before the app started")

	say("Reading the trust file and the certificate inside the app container (kubectl exec, uid 1000)")
	trust := d.exec(ctx, "cat", mountPath+"/ca_certificates.pem")
	showAnchors(trust)
	leaf := d.verify(ctx, trust)
	show("verified tls.crt against it: %s, issued by %q, valid until %s", leaf.URIs[0], leaf.Issuer.CommonName, leaf.NotAfter.Format(time.RFC3339))
	show("and the app opened tls.key itself")

	say("Beside it, the same trust two other ways: pod demo/api with trustsync.io/delivery: node")
	show("(the node agent writes its files: no container added), and pod demo/legacy with a")
	show("hand-written clusterTrustBundle projection (the kubelet writes it)")
	api := d.createAPIPods(ctx)
	show("demo/api's containers: %s; its volume: CSI driver %s", containerNames(api), api.Spec.Volumes[len(api.Spec.Volumes)-1].CSI.Driver)
	d.waitPlugin(ctx, 4)
	show("$ kubectl trustsync status -n demo     # what each pod holds, as the node agent sees it")
	d.plugin(ctx, "status", "-n", namespace)
	corp := d.corpRootID(ctx)
	show("$ kubectl trustsync who-trusts %s -n demo     # the corporate root", corp[:12])
	d.plugin(ctx, "who-trusts", corp[:12], "-n", namespace)

	say("A TrustTarget writes the signer's bundle into ConfigMap trust in namespace demo")
	d.createTrustTarget(ctx)
	show("ConfigMap demo/trust holds %d CA", d.waitConfigMap(ctx, 1))

	say("Trust across clusters: another cluster's signer serves its SPIFFE bundle endpoint, and a")
	show("FederatedTrustDomain here imports it (docs/federation.md)")
	defer d.federate(ctx)()

	say("Forcing a CA rotation (annotating the signer's CA Secret trustsync.io/rotate-requested-at)")
	show("The new CA is published first and signs only once every pod selecting the bundle holds it")
	requested := time.Now()
	d.rotate(ctx)
	rotated := d.waitForAnchors(ctx, 3)
	show("%s after the request, web's trust file holds the old and the new CA:", time.Since(requested).Round(time.Millisecond))
	showAnchors(rotated)
	show("and ConfigMap demo/trust holds %d (%s after the request)", d.waitConfigMap(ctx, 2), time.Since(requested).Round(time.Millisecond))
	d.waitRotation(ctx, func(out string) bool { return strings.Contains(out, "legacy") })
	show("$ kubectl trustsync rotation     # %s after the request: it waits for the kubelet's projection", time.Since(requested).Round(time.Second))
	d.plugin(ctx, "rotation")
	d.waitRotation(ctx, func(out string) bool { return strings.Contains(out, "Stable") })
	show("%s after the request the new CA signs: the kubelet refreshes its projection only every", time.Since(requested).Round(time.Second))
	show("minute or so, and the demo's caPropagationMaxWait (%s; an hour by default) ran out first.", maxWait)
	show("The signer says so on its CA Secret:")
	var event string
	poll.NoError(d.t, 2*time.Minute, "the signer's Event", func(ctx context.Context) (bool, error) {
		event, _ = d.node.Run(ctx, "kubectl", "get", "events", "-n", "trustsync-system", "--field-selector", "reason=RotationProceededWithoutAllPods", "-o", "custom-columns=REASON:.reason,MESSAGE:.message")
		return strings.Contains(event, "RotationProceededWithoutAllPods"), nil
	})
	fmt.Println(indent(event, "      "))
	d.verify(ctx, rotated)
	show("and web's certificate, from the old CA, still verifies against its trust file")
}

const maxWait = "20s"

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

func containerNames(p *corev1.Pod) string {
	var names []string
	for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}
