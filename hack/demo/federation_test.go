package demo

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// federate starts a second cluster (an API server of its own) whose signer, of trust
// domain b.example, serves its SPIFFE bundle endpoint on the node's address; imports it
// into the demo's cluster with a FederatedTrustDomain; and shows a node-delivery pod
// trusting a certificate that other cluster's signer issued. It returns what stops
// the second cluster.
func (d *demo) federate(ctx context.Context) func() {
	d.t.Helper()
	start := time.Now()
	b, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		d.t.Fatal(err)
	}
	stop := []func(){b.Stop}
	cleanup := func() {
		for i := len(stop) - 1; i >= 0; i-- {
			stop[i]()
		}
	}
	if err := b.CreateNamespace(ctx, "trustsync-system", nil); err != nil {
		cleanup()
		d.t.Fatal(err)
	}
	port, _ := controlplane.FreePort()
	endpoint := net.JoinHostPort(cluster.NodeIP, strconv.Itoa(port))
	signer, err := b.StartSigner("--namespace=trustsync-system", "--signer-name=trustsync.io/workload", "--trust-domain=b.example",
		"--bundle-endpoint-bind-address="+endpoint)
	if err != nil {
		cleanup()
		d.t.Fatal(err)
	}
	stop = append(stop, func() { signer.Stop(5 * time.Second) })
	bClient, err := kubernetes.NewForConfig(b.AdminConfig())
	if err != nil {
		cleanup()
		d.t.Fatal(err)
	}
	var bPEM string
	poll.NoError(d.t, 2*time.Minute, "cluster b's signer", func(ctx context.Context) (bool, error) {
		ctb, err := bClient.CertificatesV1().ClusterTrustBundles().Get(ctx, liveBundle, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		bPEM = ctb.Spec.TrustBundle
		return true, nil
	})
	show("cluster b (trust domain b.example) up in %s; its signer serves https://%s/b.example,", time.Since(start).Round(100*time.Millisecond), endpoint)
	show("presenting spiffe://b.example/trustsync/bundle-endpoint")

	peer := fmt.Sprintf(`apiVersion: trustsync.io/v1alpha1
kind: FederatedTrustDomain
metadata: {name: cluster-b}
spec:
  trustDomain: b.example
  bundleEndpointURL: https://%s/b.example
  bundleEndpointProfile: {type: https_spiffe, endpointSPIFFEID: %s}
  trustDomainBundle: |
%s`, endpoint, v1alpha1.BundleEndpointID("b.example"), indent(strings.TrimSpace(bPEM), "    "))
	file := filepath.Join(d.t.TempDir(), "peer.yaml")
	if err := os.WriteFile(file, []byte(peer+"\n"), 0o644); err != nil {
		d.t.Fatal(err)
	}
	show("$ kubectl apply -f peer.yaml     # in this cluster (b's current bundle to start from, elided)")
	fmt.Println(indent(strings.SplitAfter(peer, "trustDomainBundle: |")[0]+" ...", "      "))
	imported := time.Now()
	d.run(ctx, "kubectl", "apply", "-f", file)
	poll.NoError(d.t, 2*time.Minute, "the import", func(ctx context.Context) (bool, error) {
		out, _ := d.node.Run(ctx, "kubectl", "get", "ftd", "cluster-b", "-o", "jsonpath={.status.conditions[0].status}")
		return out == "True", nil
	})
	show("trustsync-controller fetched and imported b's bundle in %s:", time.Since(imported).Round(100*time.Millisecond))
	d.kubectl(ctx, "get", "clustertrustbundles.certificates.k8s.io", "-l", v1alpha1.TrustDomainLabel+"=b.example")

	show("pod demo/partner (trustsync.io/delivery: node) asks for it with the usual annotations:")
	show("  trustsync.io/signer-name: %s", v1alpha1.FederatedSignerName)
	show("  trustsync.io/label-selector: %s=b.example", v1alpha1.TrustDomainLabel)
	d.createPartnerPod(ctx)
	trust, err := d.node.Exec(ctx, namespace, "partner", "app", "cat", mountPath+"/ca_certificates.pem")
	if err != nil {
		d.t.Fatal(err)
	}
	cert, err := fixtures.PeerCertificate(endpoint)
	if err != nil {
		d.t.Fatal(err)
	}
	if err := fixtures.VerifyAgainst(cert, trust); err != nil {
		d.t.Fatalf("cluster b's certificate does not verify against demo/partner's trust file: %v", err)
	}
	show("a certificate cluster b's signer issued (%s) verifies against demo/partner's trust file", cert.URIs[0])
	poll.NoError(d.t, 2*time.Minute, "the pods count", func(ctx context.Context) (bool, error) {
		out, _ := d.node.Run(ctx, "kubectl", "trustsync", "federation")
		return strings.Contains(out, "1 of 1"), nil
	})
	show("$ kubectl trustsync federation")
	d.plugin(ctx, "federation")
	return cleanup
}
