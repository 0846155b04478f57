package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"
)

func TestParse_Defaults(t *testing.T) {
	p, err := Parse([]byte(`
apiVersion: trustsync.io/v1alpha1
kind: Policy
signers:
- signerName: trustsync.io/workload
  approval: {}
- signerName: example.com/short
  maxExpirationSeconds: 3600
`))
	if err != nil {
		t.Fatal(err)
	}
	w, ok := p.Signer("trustsync.io/workload")
	if !ok {
		t.Fatal("trustsync.io/workload missing")
	}
	if w.MinExpirationSeconds != 600 || w.MaxExpirationSeconds != 604800 || w.DefaultExpirationSeconds != 86400 || w.OverMaximum != Clamp {
		t.Errorf("durations = %d/%d/%d %s, want 600/604800/86400 Clamp", w.MinExpirationSeconds, w.MaxExpirationSeconds, w.DefaultExpirationSeconds, w.OverMaximum)
	}
	if a := w.Approval; w.TrustDomain != "cluster.local" || len(a.DNSNames) != 2 || len(a.Usages) != 4 || a.IPAddresses {
		t.Errorf("trust domain %q, approval defaults = %+v", w.TrustDomain, a)
	}
	short, _ := p.Signer("example.com/short")
	if short.DefaultExpirationSeconds != 3600 {
		t.Errorf("a default above the maximum must shrink to it: got %d", short.DefaultExpirationSeconds)
	}
	if short.Approval != nil {
		t.Error("a signer without approval must not get an approver")
	}
	if short.TrustDomain != "cluster.local" {
		t.Errorf("a signer without approval has trust domain %q, want the default", short.TrustDomain)
	}
	if got := strings.Join(w.KeyTypes, ","); got != "ECDSAP256,ECDSAP384,ECDSAP521,ED25519,RSA3072,RSA4096" {
		t.Errorf("default keyTypes %s, want every type Kubernetes allows", got)
	}
	if len(p.Warnings) != 0 {
		t.Errorf("warnings %q for a policy in the current shape", p.Warnings)
	}
	if p.Bundles.WarningDays() != 30 || p.Bundles.DenyExpired {
		t.Errorf("bundle defaults = %+v", p.Bundles)
	}
	if got := strings.Join(p.SignerNames(), ","); got != "trustsync.io/workload,example.com/short" {
		t.Errorf("SignerNames() = %s", got)
	}
}

func TestLoad_NoFileMeansNoSignersAndDefaultBundleRules(t *testing.T) {
	p, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Signers) != 0 || p.Bundles.WarningDays() != 30 {
		t.Errorf("Load(\"\") = %+v", p)
	}
}

func TestLoad_NamesTheFileInErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte("kind: Nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `kind: Unsupported value: "Nope"`) {
		t.Errorf("err = %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent.yaml")); err == nil || !strings.Contains(err.Error(), "failed to read policy file") {
		t.Errorf("missing file: err = %v", err)
	}
}

func TestParse_Rejects(t *testing.T) {
	head := "apiVersion: trustsync.io/v1alpha1\nkind: Policy\n"
	tests := []struct {
		name, doc, want string
	}{
		{"an unknown field, so a typo never loosens a rule", head + "signers:\n- signerName: a.io/b\n  maxExpirationSecond: 5\n", `unknown field "maxExpirationSecond"`},
		{"a wrong apiVersion", "apiVersion: v1\nkind: Policy\n", `apiVersion: Unsupported value: "v1"`},
		{"a bad signer name", head + "signers:\n- signerName: nodomain\n", `signers[0].signerName: Invalid value: "nodomain": must be a fully qualified domain and path`},
		{"a duplicate signer", head + "signers:\n- signerName: a.io/b\n- signerName: a.io/b\n", `signers[1].signerName: Duplicate value: "a.io/b"`},
		{"a minimum under 600 seconds", head + "signers:\n- signerName: a.io/b\n  minExpirationSeconds: 60\n", "signers[0].minExpirationSeconds: Invalid value: 60: must be at least 600 (10 minutes)"},
		{"a maximum under the minimum", head + "signers:\n- signerName: a.io/b\n  minExpirationSeconds: 7200\n  maxExpirationSeconds: 3600\n", "signers[0].maxExpirationSeconds: Invalid value: 3600: must not be less than minExpirationSeconds (7200)"},
		{"a default outside the bounds", head + "signers:\n- signerName: a.io/b\n  defaultExpirationSeconds: 9999999\n", "signers[0].defaultExpirationSeconds: Invalid value: 9999999: must be between minExpirationSeconds (600) and maxExpirationSeconds (604800)"},
		{"an unknown overMaximum", head + "signers:\n- signerName: a.io/b\n  overMaximum: Truncate\n", `signers[0].overMaximum: Unsupported value: "Truncate": supported values: "Clamp", "Reject"`},
		{"a key type Kubernetes does not allow", head + "signers:\n- signerName: a.io/b\n  keyTypes: [ECDSAP256, RSA2048]\n", `signers[0].keyTypes[1]: Unsupported value: "RSA2048": supported values: "ECDSAP256", "ECDSAP384", "ECDSAP521", "ED25519", "RSA3072", "RSA4096"`},
		{"an empty keyTypes list", head + "signers:\n- signerName: a.io/b\n  keyTypes: []\n", `signers[0].keyTypes: Required value: must list at least one key type`},
		{"a trust domain with a scheme", head + "signers:\n- signerName: a.io/b\n  trustDomain: spiffe://x\n", `signers[0].trustDomain: Invalid value: "spiffe://x": must be a SPIFFE trust domain`},
		{"a trust domain in capitals, which go-spiffe refuses", head + "signers:\n- signerName: a.io/b\n  trustDomain: Cluster.Local\n", `signers[0].trustDomain: Invalid value: "Cluster.Local": must be a SPIFFE trust domain such as cluster.local: lowercase letters`},
		{"a trust domain with a space", head + "signers:\n- signerName: a.io/b\n  trustDomain: exa mple.org\n", `signers[0].trustDomain: Invalid value: "exa mple.org": must be a SPIFFE trust domain`},
		{"a trust domain with a port", head + "signers:\n- signerName: a.io/b\n  trustDomain: example.org:8443\n", `signers[0].trustDomain: Invalid value: "example.org:8443": must be a SPIFFE trust domain`},
		{"a trust domain with a scheme where it used to be written", head + "signers:\n- signerName: a.io/b\n  approval:\n    trustDomain: spiffe://x\n", `signers[0].approval.trustDomain: Invalid value: "spiffe://x": must be a SPIFFE trust domain`},
		{"two trust domains that disagree", head + "signers:\n- signerName: a.io/b\n  trustDomain: a.example\n  approval:\n    trustDomain: b.example\n", `signers[0].approval.trustDomain: Invalid value: "b.example": differs from the signer's trustDomain "a.example"`},
		{"an unknown usage", head + "signers:\n- signerName: a.io/b\n  approval:\n    usages: [server auth, telepathy]\n", `signers[0].approval.usages[1]: Unsupported value: "telepathy"`},
		{"a keyRef naming no token", head + "signers:\n- signerName: a.io/b\n  keyRef: pkcs11:object=ca?module-path=/m.so&pin-source=/p\n", `signers[0].keyRef: Invalid value: keyRef "pkcs11:object=ca?module-path=/m.so&pin-source=/p" names no token: add token=LABEL`},
		{"a keyRef carrying a PIN, which the error does not repeat", head + "signers:\n- signerName: a.io/b\n  keyRef: pkcs11:token=t;object=ca?module-path=/m.so&pin-value=8642\n", `signers[0].keyRef: Invalid value: a keyRef carries a PIN (pin-value)`},
		{"negative warning days", head + "bundles:\n  expiryWarningDays: -1\n", "bundles.expiryWarningDays: Invalid value: -1: must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v\nwant it to contain %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "8642") {
				t.Errorf("the error repeats a PIN: %v", err)
			}
		})
	}
}

func TestForSigners_IsTheShorthandForAOneSignerPolicy(t *testing.T) {
	p, err := ForSigners([]string{"trustsync.io/workload"}, "example.org")
	if err != nil {
		t.Fatal(err)
	}
	s, ok := p.Signer("trustsync.io/workload")
	if !ok || s.Approval == nil || s.TrustDomain != "example.org" || s.MaxExpirationSeconds != 604800 {
		t.Errorf("ForSigners = %+v", p)
	}
	if _, err := ForSigners([]string{"bad"}, "cluster.local"); err == nil {
		t.Error("a bad signer name was accepted")
	}
}

func TestRequestedDuration(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		seconds     *int32
		want        Request
		wantErr     string
	}{
		{name: "nothing asked", want: Request{}},
		{name: "expirationSeconds", seconds: ptr.To[int32](900), want: Request{Duration: 15 * time.Minute, Set: true}},
		{name: "the annotation wins over expirationSeconds", annotations: map[string]string{DurationAnnotation: "2h"}, seconds: ptr.To[int32](900), want: Request{Duration: 2 * time.Hour, Set: true, FromAnnotation: true}},
		{name: "a malformed annotation is an error naming it", annotations: map[string]string{DurationAnnotation: "two days"}, wantErr: `annotation experimental.cert-manager.io/request-duration has value "two days", which is not a positive Go duration`},
		{name: "a negative annotation is an error", annotations: map[string]string{DurationAnnotation: "-1h"}, wantErr: "not a positive Go duration"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RequestedDuration(tc.annotations, tc.seconds)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("RequestedDuration() = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestSigner_Decide(t *testing.T) {
	clamp := Signer{SignerName: "a.io/clamp", MinExpirationSeconds: 3600, MaxExpirationSeconds: 86400, DefaultExpirationSeconds: 7200, OverMaximum: Clamp}
	reject := clamp
	reject.SignerName, reject.OverMaximum = "a.io/reject", Reject
	req := func(d time.Duration) Request { return Request{Duration: d, Set: true} }
	tests := []struct {
		name   string
		signer Signer
		req    Request
		want   Decision
	}{
		{name: "no request gets the default", signer: clamp, req: Request{}, want: Decision{Lifetime: 2 * time.Hour}},
		{name: "a request within bounds is honoured", signer: clamp, req: req(5 * time.Hour), want: Decision{Lifetime: 5 * time.Hour}},
		{name: "exactly the minimum is honoured", signer: clamp, req: req(time.Hour), want: Decision{Lifetime: time.Hour}},
		{name: "exactly the maximum is honoured", signer: reject, req: req(24 * time.Hour), want: Decision{Lifetime: 24 * time.Hour}},
		{name: "under 600 seconds is refused with upstream's message", signer: clamp, req: req(599 * time.Second), want: Decision{Refusal: "may not specify a duration less than 600 seconds (10 minutes)"}},
		{name: "under the signer's minimum is refused", signer: clamp, req: req(30 * time.Minute), want: Decision{Refusal: `requested duration 30m0s is below the minimum 1h0m0s that policy sets for signer "a.io/clamp"; ask for at least 3600 seconds`}},
		{name: "over the maximum is clamped under Clamp", signer: clamp, req: req(365 * 24 * time.Hour), want: Decision{Lifetime: 24 * time.Hour, Clamped: true}},
		{name: "over the maximum is refused under Reject", signer: reject, req: req(25 * time.Hour), want: Decision{Refusal: `requested duration 25h0m0s exceeds the maximum 24h0m0s that policy sets for signer "a.io/reject"; ask for at most 86400 seconds`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.signer.Decide(tc.req); got != tc.want {
				t.Errorf("Decide(%+v) = %+v, want %+v", tc.req, got, tc.want)
			}
		})
	}
}

// The trust domain is the signer's: a signer without approval rules has one too, which
// the injector gives its sidecars. A file in the old shape (under approval) keeps
// working, with a warning saying how to write it now.
func TestParse_TrustDomainIsTheSignersAndTheOldShapeStillWorks(t *testing.T) {
	head := "apiVersion: trustsync.io/v1alpha1\nkind: Policy\nsigners:\n"
	tests := []struct {
		name, doc, wantDomain, wantWarning string
	}{
		{name: "on the signer", doc: head + "- signerName: a.io/b\n  trustDomain: prod.example\n", wantDomain: "prod.example"},
		{name: "on a signer without approval", doc: head + "- signerName: a.io/b\n  trustDomain: prod.example\n  maxExpirationSeconds: 3600\n", wantDomain: "prod.example"},
		{name: "under approval, deprecated", doc: head + "- signerName: a.io/b\n  approval:\n    trustDomain: old.example\n", wantDomain: "old.example",
			wantWarning: "signers[0].approval.trustDomain is deprecated: write it as signers[0].trustDomain"},
		{name: "both, agreeing", doc: head + "- signerName: a.io/b\n  trustDomain: same.example\n  approval:\n    trustDomain: same.example\n", wantDomain: "same.example"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if s, _ := p.Signer("a.io/b"); s.TrustDomain != tc.wantDomain || s.Domain.Name() != tc.wantDomain {
				t.Errorf("trust domain %q (parsed %q), want %q", s.TrustDomain, s.Domain, tc.wantDomain)
			}
			if got := strings.Join(p.Warnings, "; "); (tc.wantWarning == "") != (got == "") || !strings.Contains(got, tc.wantWarning) {
				t.Errorf("warnings %q, want %q", got, tc.wantWarning)
			}
		})
	}
}

func TestParse_ExpiryWarningDaysZeroTurnsWarningsOffAndUnsetIsThirty(t *testing.T) {
	for _, tc := range []struct {
		name, bundles string
		want          int
	}{
		{name: "unset is the default, 30 days", bundles: "", want: 30},
		{name: "zero warns of nothing", bundles: "bundles:\n  expiryWarningDays: 0\n", want: 0},
		{name: "a number of days is kept", bundles: "bundles:\n  expiryWarningDays: 7\n", want: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte("apiVersion: trustsync.io/v1alpha1\nkind: Policy\n" + tc.bundles))
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Bundles.WarningDays(); got != tc.want {
				t.Errorf("WarningDays() = %d, want %d", got, tc.want)
			}
		})
	}
}
