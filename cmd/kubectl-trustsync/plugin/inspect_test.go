package plugin

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/fixtures"
)

// inspect -f reads a file as it reads an object's keys: each certificate with its
// SHA-256, subject, issuer and expiry; a private key beside them is said, never
// printed; who holds the anchors, unread without a cluster, says why.
func TestInspect_AFileItsCertificatesAndNeverAKey(t *testing.T) {
	ca := fixtures.CA("inspect root")
	dir := t.TempDir()
	file := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(file, append(ca.CertPEM(), ca.KeyPEM()...), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(dir, "none"))
	for _, format := range []string{"json", "table"} {
		t.Run(format, func(t *testing.T) {
			args := []string{"inspect", "-f", file}
			if format == "json" {
				args = append(args, "-o", "json")
			}
			out, errs, code := run(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s%s", code, out, errs)
			}
			if strings.Contains(out, "PRIVATE KEY") || strings.Contains(out, string(ca.KeyPEM()[40:80])) {
				t.Fatalf("inspect printed the private key:\n%s", out)
			}
			id := bundle.AnchorID(ca.Cert.Raw)
			if format == "table" {
				if !strings.Contains(out, id[:12]) || !strings.Contains(out, "CN=inspect root") || !strings.Contains(out, "(itself)") || !strings.Contains(out, "Held by: not read (no kubeconfig") {
					t.Errorf("the table:\n%s", out)
				}
				return
			}
			var in Inspected
			if err := json.Unmarshal([]byte(out), &in); err != nil {
				t.Fatal(err)
			}
			if len(in.Keys) != 1 || len(in.Keys[0].Anchors) != 1 || !in.Keys[0].PrivateKey || in.Source != "file "+file {
				t.Fatalf("inspect: %+v", in)
			}
			a := in.Keys[0].Anchors[0]
			if a.SHA256 != id || !a.IsCA || !a.NotAfter.Equal(ca.Cert.NotAfter.UTC()) || a.HeldBy != nil || in.HoldersNotRead == "" {
				t.Errorf("the anchor: %+v (holders not read: %q)", a, in.HoldersNotRead)
			}
		})
	}
}

func TestInspect_ArgumentsAreCheckedBeforeAnyAPICall(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect"}, "give secret NAME, configmap NAME or -f FILE"},
		{[]string{"inspect", "pod", "x"}, `"pod": inspect reads a secret or a configmap`},
		{[]string{"inspect", "secret", "x", "-f", "ca.pem"}, "give -f FILE or a kind and a name, not both"},
		{[]string{"inspect", "-f", "ca.pem", "-o", "name"}, "inspect prints a table, or -o json"},
		{[]string{"rotate", "Not A Signer"}, "a signer's name"},
		{[]string{"rotate", "example.com/x", "-o", "json"}, "rotate prints its progress, not an object"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, errs, code := run(t, append(tc.args, "--server", "https://127.0.0.1:1")...)
			if code != ExitError || !strings.Contains(errs, tc.want) {
				t.Errorf("exit %d, %q; want exit 1 saying %q", code, errs, tc.want)
			}
		})
	}
}
