package signer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/test/controlplane"
)

// A trust domain go-spiffe refuses (capitals, a space, a SPIFFE ID) would put URI
// SANs into certificates no SPIFFE verifier accepts. Every binary that builds
// identities refuses it at start, naming the value and the rule, before any API call:
// their kubeconfig points where nothing listens, so an error of any other kind would
// show that they tried.
func TestBinaries_RefuseATrustDomainSPIFFERefusesBeforeAnyAPICall(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := controlplane.WriteKubeconfig(kubeconfig, &rest.Config{Host: "https://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("apiVersion: trustsync.io/v1alpha1\nkind: Policy\nsigners:\n- signerName: example.com/td\n  trustDomain: exa mple.org\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, binary string
		args         []string
		want         string
	}{
		{"the signer's flag, in capitals", "signer", []string{"--signer-name=example.com/td", "--trust-domain=Cluster.Local"},
			`signers[0].trustDomain: Invalid value: "Cluster.Local": must be a SPIFFE trust domain such as cluster.local`},
		{"the signer's policy file, with a space", "signer", []string{"--policy=" + policyFile},
			`signers[0].trustDomain: Invalid value: "exa mple.org": must be a SPIFFE trust domain`},
		{"the webhook's policy file", "webhook", []string{"--policy=" + policyFile, "--tls-cert-file=" + filepath.Join(dir, "tls.crt"), "--tls-private-key-file=" + filepath.Join(dir, "tls.key")},
			`signers[0].trustDomain: Invalid value: "exa mple.org": must be a SPIFFE trust domain`},
		{"the sidecar's flag, as a SPIFFE ID", "sidecar", []string{"run", contract.Flag(contract.FlagDir, dir), "--" + contract.FlagCertificate,
			contract.Flag(contract.FlagTrustDomain, "spiffe://cluster.local"), contract.Flag(contract.FlagStateDir, dir)},
			`--trust-domain "spiffe://cluster.local" must be a SPIFFE trust domain`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin, err := controlplane.BuildBinary(tc.binary)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, append(tc.args, "--kubeconfig="+kubeconfig)...)
			cmd.Env = append(os.Environ(), "POD_NAME=web-0", "POD_NAMESPACE=apps", "POD_UID=uid", "SERVICE_ACCOUNT=web")
			raw, err := cmd.CombinedOutput()
			out := strings.ReplaceAll(string(raw), `\"`, `"`) // as klog quotes the error
			if err == nil {
				t.Fatalf("trustsync-%s started with a trust domain SPIFFE refuses; it said:\n%s", tc.binary, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("trustsync-%s said:\n%s\nwant it to say %q", tc.binary, out, tc.want)
			}
			if strings.Contains(out, "127.0.0.1:1") {
				t.Errorf("trustsync-%s called the API server before refusing the trust domain:\n%s", tc.binary, out)
			}
		})
	}
}
