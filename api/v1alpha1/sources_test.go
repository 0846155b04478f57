package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// fipsMode runs the rest of t as a process in FIPS 140-3 mode (on) or not would.
func fipsMode(t *testing.T, on bool) {
	was := FIPSMode
	FIPSMode = func() bool { return on }
	t.Cleanup(func() { FIPSMode = was })
}

func TestParseSources(t *testing.T) {
	fipsMode(t, false)
	tests := []struct {
		name, json, wantErr string
		wantLen             int
	}{
		{name: "every kind of source", wantLen: 5, json: `[
			{"signerName": "example.com/server-tls", "labelSelector": {"matchLabels": {"kubernetes.io/cluster-trust-bundle-version": "live"}}, "path": "ca_certificates.pem"},
			{"name": "corp-root", "path": "ca_certificates.pem"},
			{"configMap": {"name": "extra-cas", "key": "ca.crt"}, "path": "ca_certificates.pem", "optional": true},
			{"secret": {"name": "partner-ca", "key": "ca.crt"}, "path": "partner.pem"},
			{"defaultCAs": true, "path": "nested/dir/public.pem"}]`},
		{name: "an empty list has nothing to write", json: `[]`, wantErr: "sources: Required value: at least one source is required"},
		{name: "an unknown field is refused, so a typo never selects nothing", json: `[{"signer": "example.com/s", "path": "a.pem"}]`, wantErr: `json: unknown field "signer"`},
		{name: "an object instead of a list", json: `{"name": "x"}`, wantErr: "not a JSON list of sources"},
		{name: "trailing data", json: `[{"name": "x", "path": "a"}] []`, wantErr: "unexpected data after the list"},
		{name: "no kind of source", json: `[{"path": "a.pem"}]`, wantErr: "sources[0]: Required value: exactly one of name, signerName, configMap, secret or defaultCAs must be set"},
		{name: "two kinds of source", json: `[{"name": "a", "secret": {"name": "s", "key": "k"}, "path": "a.pem"}]`, wantErr: `sources[0]: Invalid value: "name, secret": exactly one of`},
		{name: "a selector without a signer", json: `[{"defaultCAs": true, "labelSelector": {}, "path": "a.pem"}]`, wantErr: "sources[0].labelSelector: Invalid value: \"\": labelSelector goes with signerName only"},
		{name: "a bad ConfigMap key", json: `[{"configMap": {"name": "cm", "key": "a/b"}, "path": "a.pem"}]`, wantErr: `sources[0].configMap.key: Invalid value: "a/b"`},
		{name: "a bad Secret name", json: `[{"secret": {"name": "Bad_Name", "key": "ca.crt"}, "path": "a.pem"}]`, wantErr: `sources[0].secret.name: Invalid value: "Bad_Name"`},
		{name: "one item's file is another's directory", json: `[{"name": "a", "path": "certs"}, {"name": "b", "path": "certs/extra.pem"}]`, wantErr: `sources[1].path: Invalid value: "certs/extra.pem": needs "certs" to be a directory, but another item writes the file "certs"`},
		{name: "a deeper file under another item's file", json: `[{"name": "b", "path": "a/b/c.pem"}, {"name": "a", "path": "a"}]`, wantErr: `sources[0].path: Invalid value: "a/b/c.pem": needs "a" to be a directory`},
		{name: "items sharing a path merge, they do not conflict", json: `[{"name": "a", "path": "ca.pem"}, {"name": "b", "path": "ca.pem"}, {"name": "c", "path": "nested/ca.pem"}]`, wantLen: 3},
		{name: "truststores in both Java formats, one with a password from a Secret", wantLen: 3, json: `[
			{"name": "a", "path": "truststore.p12", "format": "pkcs12"},
			{"name": "b", "path": "truststore.p12", "format": "pkcs12"},
			{"name": "a", "path": "truststore.jks", "format": "jks", "passwordSecret": {"name": "store-pass", "key": "password"}}]`},
		{name: "an unknown format is refused with the ones there are", json: `[{"name": "a", "path": "t.p12", "format": "p12"}]`, wantErr: `sources[0].format: Unsupported value: "p12": supported values: "pem", "pkcs12", "jks"`},
		{name: "items sharing a path must agree on its format", json: `[{"name": "a", "path": "t"}, {"name": "b", "path": "t", "format": "jks"}]`, wantErr: `sources[1].format: Invalid value: "jks": item 0 writes "t" as pem; items sharing a path must agree on its format`},
		{name: "items sharing a path must agree on its password", json: `[{"name": "a", "path": "t", "format": "jks", "passwordSecret": {"name": "p", "key": "k"}}, {"name": "b", "path": "t", "format": "jks"}]`, wantErr: `sources[1].passwordSecret: Invalid value: "no passwordSecret": item 0 names passwordSecret p/k for "t"`},
		{name: "a PEM file has no password", json: `[{"name": "a", "path": "t.pem", "passwordSecret": {"name": "p", "key": "k"}}]`, wantErr: `sources[0].passwordSecret: Invalid value: "p": goes with format pkcs12 or jks only`},
		{name: "a bad password Secret key", json: `[{"name": "a", "path": "t", "format": "pkcs12", "passwordSecret": {"name": "p", "key": "a b"}}]`, wantErr: `sources[0].passwordSecret.key: Invalid value: "a b"`},
		{name: "a PKCS#12 profile of each kind", wantLen: 2, json: `[{"name": "a", "path": "a.p12", "format": "pkcs12", "pkcs12Profile": "Modern2023"}, {"name": "a", "path": "b.p12", "format": "pkcs12", "pkcs12Profile": "Modern2026"}]`},
		{name: "an unknown PKCS#12 profile is refused with the ones there are", json: `[{"name": "a", "path": "t.p12", "format": "pkcs12", "pkcs12Profile": "LegacyRC2"}]`, wantErr: `sources[0].pkcs12Profile: Unsupported value: "LegacyRC2": supported values: "Modern2023", "Modern2026"`},
		{name: "a PKCS#12 profile for another format", json: `[{"name": "a", "path": "t.jks", "format": "jks", "pkcs12Profile": "Modern2026"}]`, wantErr: `sources[0].pkcs12Profile: Invalid value: "Modern2026": goes with format pkcs12 only`},
		{name: "items sharing a path must agree on its profile", json: `[{"name": "a", "path": "t", "format": "pkcs12"}, {"name": "b", "path": "t", "format": "pkcs12", "pkcs12Profile": "Modern2026"}]`, wantErr: `sources[1].pkcs12Profile: Invalid value: "Modern2026": item 0 writes "t" with profile Modern2023`},
		{name: "too many sources", json: "[" + strings.Repeat(`{"defaultCAs": true, "path": "a.pem"},`, MaxSources) + `{"defaultCAs": true, "path": "a.pem"}]`, wantErr: "sources: Too many: 33: must have at most 32 items"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSources([]byte(tc.json))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(got) != tc.wantLen {
				t.Fatalf("got %d sources, %v", len(got), err)
			}
		})
	}
}

// In FIPS 140-3 mode a source may ask only for a file the mode can write, and is
// refused where it is written (at admission), saying what to write instead.
func TestParseSources_FIPSModeRefusesWhatItCannotWrite(t *testing.T) {
	fipsMode(t, true)
	for _, tc := range []struct {
		name, json, wantErr, profile string
	}{
		{name: "PEM as ever", json: `[{"name": "a", "path": "ca.pem"}]`},
		{name: "PKCS#12 without a profile is Modern2026", json: `[{"name": "a", "path": "t.p12", "format": "pkcs12"}]`, profile: "Modern2026"},
		{name: "PKCS#12 Modern2026", json: `[{"name": "a", "path": "t.p12", "format": "pkcs12", "pkcs12Profile": "Modern2026"}]`, profile: "Modern2026"},
		{name: "a JKS store is refused", json: `[{"name": "a", "path": "t.jks", "format": "jks"}]`, wantErr: `sources[0].format: Invalid value: "jks": FIPS 140-3 mode cannot write a JKS truststore`},
		{name: "PKCS#12 Modern2023 is refused", json: `[{"name": "a", "path": "t.p12", "format": "pkcs12", "pkcs12Profile": "Modern2023"}]`, wantErr: `sources[0].pkcs12Profile: Invalid value: "Modern2023": FIPS 140-3 mode cannot write this profile`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSources([]byte(tc.json))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got[0].Profile() != tc.profile {
				t.Errorf("profile %q, want %q", got[0].Profile(), tc.profile)
			}
		})
	}
}

func TestValidatePath(t *testing.T) {
	tests := []struct{ path, want string }{
		{"ca_certificates.pem", ""},
		{"nested/dir/ca.pem", ""},
		{"", "Required value"},
		{"/etc/ssl/ca.pem", "must be a relative path"},
		{"../ca.pem", "must not contain '..'"},
		{"a/../../ca.pem", "must not contain '..'"},
		{"..data", "must not have an element starting with '..'"},
		{"a//b", "must not have empty or '.' elements"},
		{"./a", "must not have empty or '.' elements"},
		{"tls.key", "is reserved for the workload certificate"},
		{"credential.pem", "is reserved for the workload certificate"},
		{"tls.crt/ca.pem", "is reserved for the workload certificate"},
		{"ca\x00.pem", "must not contain a NUL byte"},
		{strings.Repeat("a", 255), ""},
		{"dir/" + strings.Repeat("a", 256), "has an element of 256 bytes; a file or directory name may have at most 255"},
		{strings.Repeat("abcdefgh/", 455) + "ca.pem", "Too long"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			errs := ValidatePath(field.NewPath("path"), tc.path)
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Errorf("ValidatePath(%q) = %v, want valid", tc.path, errs)
			case tc.want != "" && (len(errs) == 0 || !strings.Contains(errs[0].Error(), tc.want)):
				t.Errorf("ValidatePath(%q) = %v, want %q", tc.path, errs, tc.want)
			}
		})
	}
}
