package query

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trustsync/trustsync/agent/holdings"
	"github.com/trustsync/trustsync/agent/report"
	"github.com/trustsync/trustsync/test/fixtures"
)

func TestResolveAnchor_TakesAPEMFileAHashOrAUniquePrefix(t *testing.T) {
	a, b := fixtures.CA("resolve a"), fixtures.CA("resolve b")
	idA, idB := holdings.AnchorID(a.Cert.Raw), holdings.AnchorID(b.Cert.Raw)
	c := Cluster{Reports: []*report.NodeTrustReport{{AnchorSets: []report.AnchorSet{{ID: "s", Anchors: []string{idA, idB}, Count: 2}}}}}
	pemFile := filepath.Join(t.TempDir(), "a.pem")
	if err := os.WriteFile(pemFile, a.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "a.key")
	if err := os.WriteFile(keyFile, a.KeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	colons := ""
	for i := 0; i < len(idA); i += 2 {
		colons += strings.ToUpper(idA[i:i+2]) + ":"
	}
	for _, tc := range []struct {
		name, arg, want, wantErr string
	}{
		{name: "a PEM file is its certificate's anchor", arg: pemFile, want: idA},
		{name: "a whole SHA-256", arg: idA, want: idA},
		{name: "openssl's fingerprint, colons and capitals", arg: strings.TrimSuffix(colons, ":"), want: idA},
		{name: "a unique 12-digit prefix", arg: idB[:12], want: idB},
		{name: "a prefix under 12 digits is refused", arg: idA[:11], wantErr: "too short a prefix: give at least 12 hex digits"},
		{name: "a prefix nobody holds", arg: "000000000000", wantErr: "no anchor held by a pod or in a bundle starts with 000000000000"},
		{name: "neither file nor hex", arg: "corp-root", wantErr: `"corp-root" is neither a file nor a SHA-256 in hex`},
		{name: "a key file is not an anchor", arg: keyFile, wantErr: "is not a PEM file of certificates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.ResolveAnchor(tc.arg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || len(got) != 1 || got[0] != tc.want {
				t.Fatalf("got %v, %v; want [%s]", got, err, tc.want)
			}
		})
	}
}
