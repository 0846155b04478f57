package contract

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/kubeapi/clientflags"
	"github.com/trustsync/trustsync/policy"
)

// parse parses args exactly as the sidecar does.
func parse(t *testing.T, args []string) (Spec, Runtime, error) {
	t.Helper()
	fs := pflag.NewFlagSet("trustsync-sidecar", pflag.ContinueOnError)
	rt := DefaultRuntime()
	f := AddFlags(fs, &rt)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	s, err := f.Spec()
	return s, rt, err
}

type namedSpec struct {
	name string
	spec Spec
}

// specs are the specs the injector renders, of every shape: both halves of the
// contract (arguments and volume attributes) are tested over them.
func specs() []namedSpec {
	live := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/cluster-trust-bundle-version": "live"}}
	tests := []namedSpec{
		{name: "one named bundle", spec: Spec{Dir: "/var/run/trust-anchors", Sources: []v1alpha1.Source{{Name: "corp-root", Path: "ca_certificates.pem"}}}},
		{name: "every kind of source, optional and nested paths", spec: Spec{Dir: "/trust", Sources: []v1alpha1.Source{
			{SignerName: "example.com/server-tls", LabelSelector: live, Path: "ca_certificates.pem"},
			{SignerName: "example.com/all", LabelSelector: &metav1.LabelSelector{}, Path: "ca_certificates.pem"},
			{Name: "corp-root", Path: "ca_certificates.pem"},
			{ConfigMap: &v1alpha1.KeyRef{Name: "extra-cas", Key: "ca.crt"}, Path: "ca_certificates.pem", Optional: true},
			{Secret: &v1alpha1.KeyRef{Name: "partner-ca", Key: "ca.crt"}, Path: "partner.pem"},
			{DefaultCAs: true, Path: "nested/dir/public.pem"},
		}}},
		{name: "a certificate alone, with defaults", spec: Spec{Dir: "/trust", Certificate: &Certificate{
			Signer: "trustsync.io/workload", KeyType: DefaultKeyType, TrustDomain: "cluster.local", StateDir: "/var/run/trustsync-state",
		}}},
		{name: "trust and a certificate with every option", spec: Spec{Dir: "/trust", Sources: []v1alpha1.Source{{Name: "corp-root", Path: "ca.pem"}}, Certificate: &Certificate{
			Signer: "example.com/workload", KeyType: policy.KeyRSA3072, ExpirationSeconds: 3600, DNSNames: []string{"web.apps.svc", "*.web.apps.svc"},
			CredentialBundle: true, TrustDomain: "prod.example.com", StateDir: "/state",
		}}},
		{name: "truststores, reloads by URL and signal, and another warning window", spec: Spec{Dir: "/trust",
			Sources: []v1alpha1.Source{
				{Name: "corp-root", Path: "truststore.p12", Format: v1alpha1.FormatPKCS12, PasswordSecret: &v1alpha1.KeyRef{Name: "store-pass", Key: "password"}},
				{Name: "corp-root", Path: "truststore.jks", Format: v1alpha1.FormatJKS},
			},
			Reload:            &Reload{URL: "https://localhost:8443/-/reload", Signal: "SIGHUP", Container: "app"},
			ExpiryWarningDays: 7,
		}},
		{name: "no expiry warnings", spec: Spec{Dir: "/trust", Sources: []v1alpha1.Source{{Name: "corp-root", Path: "ca.pem"}}, ExpiryWarningDays: 0}},
		{name: "the default warning window is not rendered", spec: Spec{Dir: "/trust", Sources: []v1alpha1.Source{{Name: "corp-root", Path: "ca.pem"}}, ExpiryWarningDays: DefaultExpiryWarningDays}},
	}
	for _, kt := range KeyTypes {
		tests = append(tests, namedSpec{name: "key type " + kt, spec: Spec{Dir: "/trust", Certificate: &Certificate{Signer: "s.example/w", KeyType: kt, TrustDomain: "td", StateDir: "/s"}}})
	}
	return tests
}

// What the injector renders, the sidecar parses back to the same Spec: the contract
// cannot drift between the two halves without this failing.
func TestSpec_ArgsParseBackToTheSameSpec(t *testing.T) {
	for _, tc := range specs() {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.spec.Args()
			got, _, err := parse(t, args)
			if err != nil {
				t.Fatalf("the sidecar refuses what the injector renders, %q: %v", args, err)
			}
			if !reflect.DeepEqual(got, tc.spec) {
				t.Fatalf("round trip changed the spec\n args: %q\n got:  %#v\n want: %#v", args, got, tc.spec)
			}
			if again := got.Args(); !reflect.DeepEqual(again, args) {
				t.Fatalf("rendering the parsed spec gives other args:\n%q\n%q", again, args)
			}
		})
	}
}

// Pods injected before --sources was renamed pass --projections: the sidecar in a new
// image reads it to the same Spec.
func TestSpec_TheSourcesFlagsFormerNameStillParses(t *testing.T) {
	list := `[{"name":"corp-root","path":"ca.pem"}]`
	want, _, err := parse(t, []string{Flag(FlagDir, "/trust"), Flag(FlagSources, list)})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := parse(t, []string{Flag(FlagDir, "/trust"), Flag(flagSourcesFormer, list)})
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("--%s parsed to %#v, %v; want %#v as from --%s", flagSourcesFormer, got, err, want, FlagSources)
	}
	if _, _, err := parse(t, []string{Flag(FlagDir, "/trust"), Flag(FlagSources, list), Flag(flagSourcesFormer, list)}); err != nil {
		t.Errorf("both names with the same list: %v", err)
	}
	_, _, err = parse(t, []string{Flag(FlagDir, "/trust"), Flag(FlagSources, list), Flag(flagSourcesFormer, `[]`)})
	if err == nil || !strings.Contains(err.Error(), "--sources and --projections (its former name) are both set, and differ") {
		t.Errorf("both names, differing: err = %v", err)
	}
}

func TestSpec_FlagsRefuseWhatTheSidecarCannotDo(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no directory", []string{Flag(FlagSources, `[{"name": "a", "path": "a.pem"}]`)}, "--dir is required"},
		{"nothing to write", []string{Flag(FlagDir, "/d")}, "--sources is required (or --certificate)"},
		{"an empty list and no certificate", []string{Flag(FlagDir, "/d"), Flag(FlagSources, "[]")}, "nothing to write"},
		{"sources that do not parse", []string{Flag(FlagDir, "/d"), Flag(FlagSources, `[{"signer": "x"}]`)}, `--sources: not a JSON list of sources: json: unknown field "signer"`},
		{"a source writing the certificate's file", []string{Flag(FlagDir, "/d"), Flag(FlagSources, `[{"name": "a", "path": "tls.key"}]`)}, "is reserved for the workload certificate"},
		{"an unknown key type", []string{Flag(FlagDir, "/d"), "--" + FlagCertificate, Flag(FlagCertificateKeyType, "DSA1024")}, `--certificate-key-type "DSA1024" is not one of ECDSAP256, ECDSAP384, RSA2048, RSA3072, ED25519`},
		{"a negative lifetime", []string{Flag(FlagDir, "/d"), "--" + FlagCertificate, Flag(FlagCertificateExpirationSeconds, "-1")}, "is negative"},
		{"a reload URL off the pod", []string{Flag(FlagDir, "/d"), "--" + FlagCertificate, Flag(FlagReloadURL, "http://10.0.0.1/reload")}, `--reload-url "http://10.0.0.1/reload" must be on the pod's loopback (host 127.0.0.1 or localhost), not "10.0.0.1"`},
		{"a reload URL that is not http", []string{Flag(FlagDir, "/d"), "--" + FlagCertificate, Flag(FlagReloadURL, "file:///reload")}, "must be an http or https URL"},
		{"a reload URL with credentials", []string{Flag(FlagDir, "/d"), "--" + FlagCertificate, Flag(FlagReloadURL, "http://u:p@localhost/r")}, "must not carry user information"},
		{"a reload URL with a bad port", []string{Flag(FlagDir, "/d"), "--" + FlagCertificate, Flag(FlagReloadURL, "http://localhost:70000/r")}, `has port "70000"`},
		{"a signal that is no reload signal", []string{Flag(FlagDir, "/d"), "--" + FlagCertificate, Flag(FlagReloadSignal, "SIGKILL"), Flag(FlagReloadContainer, "app")}, `--reload-signal "SIGKILL" is not one of SIGHUP, SIGUSR1, SIGUSR2`},
		{"a signal for no container", []string{Flag(FlagDir, "/d"), "--" + FlagCertificate, Flag(FlagReloadSignal, "SIGHUP")}, "--reload-container is required with --reload-signal"},
		{"a trust domain go-spiffe refuses", []string{Flag(FlagDir, "/d"), "--" + FlagCertificate, Flag(FlagTrustDomain, "Cluster.Local")}, `--trust-domain "Cluster.Local" must be a SPIFFE trust domain such as cluster.local`},
		{"a trust domain given as a SPIFFE ID", []string{Flag(FlagDir, "/d"), "--" + FlagCertificate, Flag(FlagTrustDomain, "spiffe://cluster.local")}, `--trust-domain "spiffe://cluster.local" must be a SPIFFE trust domain`},
		{"a negative warning window", []string{Flag(FlagDir, "/d"), "--" + FlagCertificate, Flag(FlagExpiryWarningDays, "-1")}, "--expiry-warning-days -1 is negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parse(t, tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestRuntime_RunAndInitNeedThePodsIdentity(t *testing.T) {
	cert := Spec{Dir: "/d", Certificate: &Certificate{Signer: "s", KeyType: DefaultKeyType, TrustDomain: "td"}}
	namespaced := Spec{Dir: "/d", Sources: []v1alpha1.Source{{ConfigMap: &v1alpha1.KeyRef{Name: "cm", Key: "ca.crt"}, Path: "a.pem"}}}
	tests := []struct {
		name    string
		rt      Runtime
		spec    Spec
		wantErr []string
	}{
		{"a certificate names its identity and keeps its pending key", Runtime{PodName: "web-1", PodNamespace: "apps"}, cert,
			[]string{"--service-account is required with --certificate", "--state-dir is required with --certificate"}},
		{"ConfigMap sources are read from the pod's namespace", Runtime{}, namespaced, []string{"--pod-namespace (or $POD_NAMESPACE) is required for ConfigMap and Secret sources"}},
		{"a negative discovery interval", Runtime{PodNamespace: "a", APIDiscoveryInterval: -1}, namespaced, []string{"--api-discovery-interval -1ns is negative"}},
		{"a truststore password is read from the pod's namespace", Runtime{}, Spec{Dir: "/d", Sources: []v1alpha1.Source{{Name: "a", Path: "t.jks", Format: v1alpha1.FormatJKS, PasswordSecret: &v1alpha1.KeyRef{Name: "p", Key: "k"}}}},
			[]string{"--pod-namespace (or $POD_NAMESPACE) is required for ConfigMap and Secret sources and truststore passwords"}},
		{"bundle sources need no identity", Runtime{}, Spec{Dir: "/d", Sources: []v1alpha1.Source{{Name: "a", Path: "a.pem"}}}, nil},
		{"a rate limit no client should run with", Runtime{Flags: clientflags.Flags{QPS: -1, Burst: 10}}, Spec{Dir: "/d", Sources: []v1alpha1.Source{{Name: "a", Path: "a.pem"}}},
			[]string{"--kube-api-qps (-1) and --kube-api-burst (10) must be positive"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rt.Flags == (clientflags.Flags{}) {
				tc.rt.Flags = DefaultRuntime().Flags // the rates every runtime starts with
			}
			err := tc.rt.Validate(tc.spec)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			for _, want := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Validate() = %v, want it to contain %q", err, want)
				}
			}
		})
	}
}

// Only this package spells the sidecar's flags: code that invokes the sidecar renders
// a Spec or uses Flag with these constants, so renaming a flag is one edit. Flags the
// other binaries share (kubeconfig, kube-api-qps, kube-api-burst, trust-domain) are
// left out: their spelling elsewhere is the other binaries'.
func TestFlags_NoSidecarFlagIsSpelledOutsideTheContract(t *testing.T) {
	own := []string{FlagDir, FlagSources, flagSourcesFormer, FlagCertificate, FlagCertificateSigner, FlagCertificateKeyType, FlagCertificateExpirationSeconds,
		FlagCertificateDNSNames, FlagCertificateCredentialBundle, FlagStateDir, FlagPodName, FlagPodNamespace, FlagPodUID,
		FlagServiceAccount, FlagTerminationLog, FlagMetricsBindAddress, FlagAPIDiscoveryInterval, FlagInitTimeoutSeconds}
	literal := regexp.MustCompile("[\"`]--(" + strings.Join(own, "|") + ")[=\"` :]")
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	here, _ := os.Getwd()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == here || d.Name() == "_output" || d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if m := literal.FindString(line); m != "" {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d spells the sidecar's flag %s; use package contract", rel, i+1, strings.Trim(m, "=\"` :"))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// pflag reads a backticked word in a usage as the flag's value name: --help would
// print "--pod-uid kubectl describe pod".
func TestFlags_NoUsageNamesItsValueByAccident(t *testing.T) {
	fs := pflag.NewFlagSet("sidecar", pflag.ContinueOnError)
	var rt Runtime
	AddFlags(fs, &rt)
	fs.VisitAll(func(f *pflag.Flag) {
		if name, _ := pflag.UnquoteUsage(f); strings.Contains(name, " ") {
			t.Errorf("--%s's usage names its value %q", f.Name, name)
		}
	})
}
