package sidecar

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/delivery/render"
	"github.com/trustsync/trustsync/delivery/write"
)

func TestProbe(t *testing.T) {
	sourcesJSON := `[{"name": "corp", "path": "ca.pem"}, {"name": "extra", "path": "optional.pem", "optional": true}, {"defaultCAs": true, "path": "nested/web.pem"}]`
	tests := []struct {
		name    string
		files   map[string]string
		wantErr string
	}{
		{name: "every required file present passes; optional ones may be missing", files: map[string]string{"ca.pem": "x", "nested/web.pem": "y"}},
		{name: "a required file missing fails", files: map[string]string{"ca.pem": "x"}, wantErr: "nested/web.pem is not written yet"},
		{name: "an empty required file fails", files: map[string]string{"ca.pem": "", "nested/web.pem": "y"}, wantErr: "ca.pem is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			payload := map[string]render.File{}
			for p, c := range tc.files {
				payload[p] = render.File{Data: []byte(c), Mode: 0o644}
			}
			if _, err := write.NewAtomicWriter(dir).Write(payload); err != nil {
				t.Fatal(err)
			}
			o := parsed(t, contract.Flag(contract.FlagDir, dir), contract.Flag(contract.FlagSources, sourcesJSON))
			err := Probe(o)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Probe() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestProbe_RefusesBadFlags(t *testing.T) {
	o := parsed(t, contract.Flag(contract.FlagDir, t.TempDir()), contract.Flag(contract.FlagSources, `[{"name": "corp"}]`))
	if err := Probe(o); err == nil || !strings.Contains(err.Error(), "--"+contract.FlagSources+": sources[0].path: Required value") {
		t.Errorf("Probe() = %v", err)
	}
}

// init against an API server that does not answer gives up within its timeout, and
// says why in the termination log, where `kubectl describe pod` shows it.
func TestInit_UnreachableAPIServerFailsWithAReason(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {token: x}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	o := parsed(t, contract.Flag(contract.FlagDir, t.TempDir()), contract.Flag(contract.FlagSources, `[{"name": "corp", "path": "ca.pem"}]`))
	o.Kubeconfig, o.PodNamespace = kubeconfig, "apps"
	o.TerminationLog = filepath.Join(dir, "termination-log")
	o.InitTimeoutSecs = 2
	err := Init(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the API server") {
		t.Fatalf("Init() = %v", err)
	}
	logged, _ := os.ReadFile(o.TerminationLog)
	if !strings.Contains(string(logged), "cannot reach the API server") || strings.Count(string(logged), "\n") != 1 {
		t.Errorf("termination log = %q, want the one-line reason", logged)
	}
}

func TestOptions_CertificateNeedsItsIdentity(t *testing.T) {
	o := parsed(t, contract.Flag(contract.FlagDir, t.TempDir()), "--"+contract.FlagCertificate)
	o.PodNamespace, o.PodName, o.ServiceAccount = "apps", "web-1", ""
	err := o.Validate(true)
	if err == nil || !strings.Contains(err.Error(), "--"+contract.FlagServiceAccount+" is required with --"+contract.FlagCertificate) || !strings.Contains(err.Error(), "--"+contract.FlagStateDir+" is required") {
		t.Errorf("Validate(true) = %v", err)
	}
	// The probe needs no identity: it only checks files.
	if err := o.Validate(false); err != nil {
		t.Errorf("Validate(false) = %v", err)
	}
}

// parsed is the Options a command line gives, parsed as the binary parses it.
func parsed(t *testing.T, args ...string) *Options {
	t.Helper()
	o := NewOptions()
	fs := pflag.NewFlagSet("trustsync-sidecar", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestValidate_FormsTheIdentityOnlyWithACertificate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cert *contract.Certificate
		want string
	}{
		{name: "without a certificate there is no identity"},
		{name: "with one it is the ServiceAccount's SPIFFE ID in the trust domain",
			cert: &contract.Certificate{Signer: "trustsync.io/workload", KeyType: contract.DefaultKeyType, TrustDomain: "cluster.local", StateDir: "/state"},
			want: "spiffe://cluster.local/ns/apps/sa/web"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := contract.Spec{Dir: "/trust", Sources: []v1alpha1.Source{{Name: "a", Path: "a.pem"}}, Certificate: tc.cert}
			o := parsed(t, spec.Args()...)
			o.PodNamespace, o.ServiceAccount, o.PodName, o.PodUID = "apps", "web", "web-0", "uid"
			if err := o.Validate(true); err != nil {
				t.Fatal(err)
			}
			if got := o.identity; (got.IsZero() && tc.want != "") || (!got.IsZero() && got.String() != tc.want) {
				t.Errorf("identity %q, want %q", got, tc.want)
			}
		})
	}
}
