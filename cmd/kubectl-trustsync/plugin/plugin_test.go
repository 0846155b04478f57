package plugin

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"

	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/trustreport/query"
)

// run is Main with args, and what it printed.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errs bytes.Buffer
	code = Main(args, &out, &errs)
	return out.String(), errs.String(), code
}

// An -o the plugin cannot print is refused before anything is read: the server given
// here does not exist, and the error must be about -o, not about reaching it.
func TestMain_AnOutputItCannotPrintIsRefusedBeforeAnyAPICall(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"an unknown format", []string{"-o", "xml"}, `--output "xml" is not supported: give json, yaml, name, wide, jsonpath=TEMPLATE or go-template=TEMPLATE`},
		{"a jsonpath that does not parse", []string{"-o", "jsonpath={.items[}"}, `--output "jsonpath={.items[}": error parsing jsonpath {.items[}`},
		{"a go-template that does not parse", []string{"-o", "go-template={{.items"}, `--output "go-template={{.items": error parsing template {{.items`},
		{"a template format without a template", []string{"-o", "jsonpath"}, `--output "jsonpath": template format specified but no template given`},
		{"a template beside a format that takes none", []string{"-o", "json", "--template", "{{.version}}"}, `--template is for -o go-template, go-template-file, jsonpath or jsonpath-file, not -o "json"`},
		{"a template file that cannot be read", []string{"-o", "jsonpath-file=/no/such/file"}, `error reading --template /no/such/file`},
	} {
		for _, cmd := range [][]string{{"status"}, {"who-trusts", "abcdef012345"}, {"rotation"}, {"federation"}, {"grants"}, {"version"}, {"convert", "-f", "-"}} {
			_, stderr, code := run(t, append(append(cmd, tc.args...), "--server", "https://127.0.0.1:1")...)
			if code != ExitError || !strings.Contains(stderr, tc.says) {
				t.Errorf("%s, %s: exit %d, %q; want 1 and %q", tc.name, cmd[0], code, stderr, tc.says)
			}
		}
	}
}

// -o takes what kubectl get takes: templates (jsonpath, go-template, their -file
// forms, --template) read the fields -o json prints; name prints kind[.group]/name
// lines kubectl takes back; a command with nothing to name or tabulate says so.
func TestMain_OutputFormatsAreKubectls(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bundles.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: corp}
spec:
  sources: [{inLine: "`+strings.ReplaceAll(fixtures.Bundle(fixtures.CA("corp")), "\n", `\n`)+`"}]
  target: {configMap: {key: ca.crt}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	template := filepath.Join(t.TempDir(), "template")
	if err := os.WriteFile(template, []byte(`{.version}`), 0o644); err != nil {
		t.Fatal(err)
	}
	version, _, _ := run(t, "version", "-o", "json")
	var v struct{ Version string }
	if err := json.Unmarshal([]byte(version), &v); err != nil || v.Version == "" {
		t.Fatalf("version -o json: %q (%v)", version, err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want *regexp.Regexp
		code int
	}{
		{"jsonpath reads the JSON's fields", []string{"version", "-o", "jsonpath={.version}"}, regexp.MustCompile(`^` + regexp.QuoteMeta(v.Version) + `$`), 0},
		{"jsonpath-as-json prints them as JSON", []string{"version", "-o", "jsonpath-as-json={.version}"}, regexp.MustCompile(`^\[\s*"` + regexp.QuoteMeta(v.Version) + `"\s*\]\s*$`), 0},
		{"jsonpath-file reads the template from a file", []string{"version", "-o", "jsonpath-file=" + template}, regexp.MustCompile(`^` + regexp.QuoteMeta(v.Version) + `$`), 0},
		{"go-template reads the JSON's fields", []string{"version", "-o", "go-template={{.version}}"}, regexp.MustCompile(`^` + regexp.QuoteMeta(v.Version) + `$`), 0},
		{"--template alone is a go-template", []string{"version", "--template", "v={{.version}}"}, regexp.MustCompile(`^v=` + regexp.QuoteMeta(v.Version) + `$`), 0},
		{"jsonpath ranges over a List's items", []string{"convert", "-f", file, "--api", "mirror", "-o", `jsonpath={range .items[*]}{.kind}{"\n"}{end}`}, regexp.MustCompile(`^ClusterTrustBundle\nTrustTarget\n$`), 0},
		{"name prints kind.group/name", []string{"convert", "-f", file, "--api", "mirror", "-o", "name"}, regexp.MustCompile(`^clustertrustbundle\.trustsync\.io/\S+\ntrusttarget\.trustsync\.io/corp\n$`), 0},
		{"name has nothing to name in a version", []string{"version", "-o", "name"}, regexp.MustCompile(`version prints no object and no table`), ExitError},
		{"wide has no table in a conversion", []string{"convert", "-f", file, "-o", "wide"}, regexp.MustCompile(`convert prints objects, not a table`), ExitError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(t, tc.args...)
			if code != tc.code || !tc.want.MatchString(stdout+stderr) {
				t.Errorf("%v: exit %d, printed %q, said %q; want exit %d and %s", tc.args, code, stdout, stderr, tc.code, tc.want)
			}
		})
	}
}

func TestMain_VersionPrintsTheSameInEveryFormat(t *testing.T) {
	var fromJSON, fromYAML map[string]string
	out, _, code := run(t, "version", "-o", "json")
	if code != 0 || json.Unmarshal([]byte(out), &fromJSON) != nil {
		t.Fatalf("version -o json: exit %d, %q", code, out)
	}
	out, _, code = run(t, "version", "-o", "yaml")
	if code != 0 || yaml.UnmarshalStrict([]byte(out), &fromYAML) != nil {
		t.Fatalf("version -o yaml: exit %d, %q", code, out)
	}
	if fromJSON["version"] == "" || fromJSON["version"] != fromYAML["version"] {
		t.Errorf("json says %v, yaml %v", fromJSON, fromYAML)
	}
}

// The scripts register kubectl-trustsync, the executable the shell runs (cobra's
// default would register the command's name, trustsync, which nothing runs), and
// the plugin linked as kubectl_complete-trustsync answers kubectl's completion.
func TestMain_CompletesInEveryShell(t *testing.T) {
	for _, tc := range []struct{ shell, registers string }{
		{"bash", "complete -o default -F __start_kubectl-trustsync kubectl-trustsync"},
		{"zsh", "#compdef kubectl-trustsync"},
		{"fish", "complete -c kubectl-trustsync "},
		{"powershell", "Register-ArgumentCompleter -CommandName 'kubectl-trustsync'"},
	} {
		out, stderr, code := run(t, "completion", tc.shell)
		if code != 0 || !strings.Contains(out, tc.registers) || strings.Contains(out, "__start_trustsync ") {
			t.Errorf("completion %s: exit %d, %d bytes, %s; want it to say %q", tc.shell, code, len(out), stderr, tc.registers)
		}
	}
	if _, stderr, code := run(t, "completion", "tcsh"); code != ExitError || !strings.Contains(stderr, `invalid argument "tcsh"`) {
		t.Errorf("completion tcsh: exit %d, %q", code, stderr)
	}
	if got := Args([]string{"/usr/local/bin/kubectl_complete-trustsync", "who-trusts", ""}); !slices.Equal(got, []string{"__complete", "who-trusts", ""}) {
		t.Errorf("run as kubectl_complete-trustsync, the arguments are %q", got)
	}
	if got := Args([]string{"kubectl-trustsync", "status"}); !slices.Equal(got, []string{"status"}) {
		t.Errorf("run as kubectl-trustsync, the arguments are %q", got)
	}
	// What the shell asks for: the commands, then a command's flags.
	out, _, _ := run(t, "__complete", "")
	for _, want := range []string{"status", "who-trusts", "rotation", "federation", "convert", "version"} {
		if !strings.Contains(out, want) {
			t.Errorf("completing a command offers no %s:\n%s", want, out)
		}
	}
	if out, _, _ := run(t, "__complete", "status", "--all-"); !strings.Contains(out, "--all-namespaces") {
		t.Errorf("completing status --all- offers:\n%s", out)
	}
}

func TestMain_EveryCommandHelpHasExamples(t *testing.T) {
	for _, cmd := range []string{"status", "who-trusts", "rotation", "federation", "convert", "version"} {
		out, _, code := run(t, cmd, "--help")
		if code != 0 || !strings.Contains(out, "Examples:\n") || !strings.Contains(out, "kubectl trustsync "+cmd) {
			t.Errorf("%s --help (exit %d) has no examples of itself:\n%s", cmd, code, out)
		}
	}
}

// convert -o json prints one List that kubectl apply -f takes: the objects ready to
// apply, never what would be refused, which is named on standard error.
func TestConvert_JSONIsOneListOfWhatIsReadyToApply(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bundles.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: corp}
spec:
  sources: [{useDefaultCAs: true}, {inLine: "`+strings.ReplaceAll(fixtures.Bundle(fixtures.CA("corp")), "\n", `\n`)+`"}]
  target: {configMap: {key: ca.crt}}
---
apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: `+strings.Repeat("x", 70)+`}
spec:
  sources: [{useDefaultCAs: true}]
  target: {configMap: {key: ca.crt}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := run(t, "convert", "-f", file, "-o", "json", "--api", "native")
	var list struct {
		APIVersion, Kind string
		Items            []struct {
			Kind     string
			Metadata struct{ Name string }
			Status   any
		}
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("not JSON (%v):\n%s", err, out)
	}
	var kinds []string
	for _, item := range list.Items {
		kinds = append(kinds, item.Kind+"/"+item.Metadata.Name)
		if item.Status != nil {
			t.Errorf("%s carries a status", item.Metadata.Name)
		}
	}
	if list.Kind != "List" || list.APIVersion != "v1" || len(kinds) != 2 || !strings.HasPrefix(kinds[0], "ClusterTrustBundle/") || kinds[1] != "TrustTarget/corp" {
		t.Errorf("printed %s %s %v; want a v1 List of corp's bundle and TrustTarget alone", list.APIVersion, list.Kind, kinds)
	}
	if code != ExitNotAll || !strings.Contains(stderr, "would be refused: metadata.name") {
		t.Errorf("exit %d, stderr %q: want 3 and the refused target named", code, stderr)
	}
}

// docs/cli.md's JSON examples are what the plugin prints: each decodes into the type
// printed with no field the type lacks, and names every field the type has.
func TestDocs_JSONExamplesMatchWhatIsPrinted(t *testing.T) {
	data, err := os.ReadFile("../../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(string(data), -1)
	examples := []struct {
		name string
		into any
		// fields every printed field name, as JSON names it
		fields []string
	}{
		{"status", &struct {
			Items []query.FileStatus `json:"items"`
		}{}, append([]string{"items"}, jsonFields(reflect.TypeFor[query.FileStatus]())...)},
		{"who-trusts", &trustAnswer{}, append(append(jsonFields(reflect.TypeFor[trustAnswer]()), jsonFields(reflect.TypeFor[query.Holder]())...), jsonFields(reflect.TypeFor[query.Unseen]())...)},
		{"inspect", &Inspected{}, append(append(jsonFields(reflect.TypeFor[Inspected]()), jsonFields(reflect.TypeFor[InspectedKey]())...), jsonFields(reflect.TypeFor[InspectedAnchor]())...)},
		{"rotation", &Rotation{}, append(jsonFields(reflect.TypeFor[Rotation]()), jsonFields(reflect.TypeFor[query.Straggler]())...)},
		{"federation", &Peer{}, jsonFields(reflect.TypeFor[Peer]())},
		{"grants", &NamespaceGrants{}, append(append(jsonFields(reflect.TypeFor[NamespaceGrants]()), jsonFields(reflect.TypeFor[GrantedBundle]())...), jsonFields(reflect.TypeFor[GrantedSigner]())...)},
	}
	if len(blocks) != len(examples) {
		t.Fatalf("docs/cli.md has %d JSON examples, want %d (status, who-trusts, inspect, rotation, federation, grants)", len(blocks), len(examples))
	}
	for i, ex := range examples {
		text := strings.ReplaceAll(blocks[i][1], `"<sha256>"`, `"`+strings.Repeat("ab", 32)+`"`)
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(ex.into); err != nil {
			t.Errorf("the %s example is not what the plugin prints: %v", ex.name, err)
		}
		for _, f := range ex.fields {
			if !strings.Contains(text, `"`+f+`"`) {
				t.Errorf("the %s example leaves out the printed field %q", ex.name, f)
			}
		}
	}
}

// jsonFields are the JSON names of t's fields, embedded structs' included.
func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// Every `kubectl trustsync ...` the docs teach (README, docs/, the chart's NOTES.txt,
// the alerts) names a subcommand and flags the plugin has: a reader following one never
// meets "unknown command" or "unknown flag". In Markdown, what is in code (spans and
// blocks) is a command; prose may mention the plugin by name.
func TestDocs_EveryPluginCommandTaughtExists(t *testing.T) {
	root := (&options{flags: genericclioptions.NewConfigFlags(true), stdout: io.Discard}).command(io.Discard)
	root.InitDefaultCompletionCmd() // cobra adds it as the command runs
	var sources []string
	docs, _ := filepath.Glob("../../../docs/*.md")
	for _, f := range append(docs, "../../../README.md", "../../../charts/trustsync/README.md") {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // the chart's README is optional
		}
		for _, code := range codeOf(string(data)) {
			sources = append(sources, f+"\x00"+code)
		}
	}
	for _, f := range []string{"../../../charts/trustsync/templates/NOTES.txt", "../../../charts/trustsync/files/prometheus-rules.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, f+"\x00"+string(data))
	}
	invocation := regexp.MustCompile(`kubectl trustsync((?: +[^ \n]+)*)`)
	checked := 0
	for _, src := range sources {
		file, text, _ := strings.Cut(src, "\x00")
		for _, m := range invocation.FindAllStringSubmatch(text, -1) {
			words := strings.Fields(m[1])
			cmd := root
			if len(words) > 0 && !strings.HasPrefix(words[0], "-") && !strings.ContainsAny(words[0], "<[{") {
				sub, _, err := root.Find(words[:1])
				if err != nil || sub == root {
					t.Errorf("%s: %q names no subcommand of the plugin", file, m[0])
					continue
				}
				cmd = sub
			}
			checked++
			for _, w := range words {
				if strings.ContainsAny(w, "#)`;|>") && !strings.HasPrefix(strings.TrimLeft(w, "[("), "-") {
					break // the command's end: a comment, a pipe, a redirect, prose
				}
				flag, _, _ := strings.Cut(strings.Trim(w, "[]()`,.;"), "=")
				switch {
				case strings.HasPrefix(flag, "--") && flag != "--help":
					if cmd.Flags().Lookup(flag[2:]) == nil && cmd.InheritedFlags().Lookup(flag[2:]) == nil {
						t.Errorf("%s: %q: kubectl trustsync %s has no flag %s", file, m[0], cmd.Name(), flag)
					}
				case len(flag) == 2 && flag[0] == '-' && flag != "-h":
					if cmd.Flags().ShorthandLookup(flag[1:]) == nil && cmd.InheritedFlags().ShorthandLookup(flag[1:]) == nil {
						t.Errorf("%s: %q: kubectl trustsync %s has no flag %s", file, m[0], cmd.Name(), flag)
					}
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d commands found in the docs; the search is broken", checked)
	}
}

// codeOf is what Markdown text holds as code: fenced blocks and inline spans.
func codeOf(md string) []string {
	var out []string
	fence := regexp.MustCompile("(?s)```[a-z]*\n(.*?)```")
	for _, m := range fence.FindAllStringSubmatch(md, -1) {
		out = append(out, m[1])
	}
	rest := fence.ReplaceAllString(md, "")
	for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(rest, -1) {
		out = append(out, m[1])
	}
	return out
}

// What kubectl get -o yaml prints (a v1 List) converts as its items; inline CAs are
// written for the bundle API asked for, or the one the cluster serves, which convert
// asks only when there is a bundle to write and, when it cannot, says what to give;
// a target missing a source trust-manager had is never printed as ready to apply.
func TestConvert_TakesAListAndWritesForTheBundleAPI(t *testing.T) {
	inline := strings.ReplaceAll(fixtures.Bundle(fixtures.CA("corp")), "\n", `\n`)
	list := `apiVersion: v1
kind: List
items:
- apiVersion: trust.cert-manager.io/v1alpha1
  kind: Bundle
  metadata: {name: corp}
  spec:
    sources: [{useDefaultCAs: true}, {inLine: "` + inline + `"}]
    target: {configMap: {key: ca.crt}}
- apiVersion: trust.cert-manager.io/v1alpha1
  kind: Bundle
  metadata: {name: public}
  spec:
    sources: [{useDefaultCAs: true}]
    target: {configMap: {key: ca.crt}}
`
	withSecret := `apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: partial}
spec:
  sources: [{useDefaultCAs: true}, {secret: {name: ca-key-pair, key: tls.crt}}]
  target: {configMap: {key: ca.crt}}
`
	unreachable := []string{"--server", "https://127.0.0.1:1", "--request-timeout", "2s"}
	for _, tc := range []struct {
		name, input string
		args        []string
		wantCode    int
		wantItems   []string
		wantStderr  string
	}{
		{name: "a List's items, native bundles asked for", input: list, args: []string{"--api", "native"},
			wantItems: []string{"certificates.k8s.io/v1 ClusterTrustBundle corp-inline-1", "trustsync.io/v1alpha1 TrustTarget corp", "trustsync.io/v1alpha1 TrustTarget public"}},
		{name: "mirror bundles asked for", input: list, args: []string{"--api", "mirror"},
			wantItems: []string{"trustsync.io/v1alpha1 ClusterTrustBundle corp-inline-1", "trustsync.io/v1alpha1 TrustTarget corp", "trustsync.io/v1alpha1 TrustTarget public"}},
		{name: "auto with no cluster to ask, and a bundle to write, says to choose", input: list, args: unreachable,
			wantCode: ExitError, wantStderr: "asking the cluster which bundle API it serves failed"},
		{name: "auto with no bundle to write asks nothing", input: withSecret, args: unreachable,
			wantCode: ExitNotAll, wantStderr: `TrustTarget "partial" would be refused: source 1 not carried over`},
		{name: "an unknown API is refused", input: list, args: []string{"--api", "v1"},
			wantCode: ExitError, wantStderr: `--api "v1": give auto`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "bundles.yaml")
			if err := os.WriteFile(file, []byte(tc.input), 0o644); err != nil {
				t.Fatal(err)
			}
			out, stderr, code := run(t, append([]string{"convert", "-f", file, "-o", "json"}, tc.args...)...)
			if code != tc.wantCode || !strings.Contains(stderr, tc.wantStderr) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tc.wantCode, tc.wantStderr)
			}
			if tc.wantCode == ExitError {
				return
			}
			var got struct {
				Items []struct {
					APIVersion, Kind string
					Metadata         struct{ Name string }
				}
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("not JSON (%v):\n%s", err, out)
			}
			var items []string
			for _, i := range got.Items {
				items = append(items, i.APIVersion+" "+i.Kind+" "+i.Metadata.Name)
			}
			if !slices.Equal(items, tc.wantItems) {
				t.Errorf("printed %q, want %q", items, tc.wantItems)
			}
		})
	}
}

// With no kubeconfig anywhere, a command says so and what to give, instead of a
// refused connection to http://localhost:8080, a server the user never named.
func TestMain_NoKubeconfigIsSaid(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, cmd := range [][]string{{"status"}, {"who-trusts", "abcdef012345"}, {"rotation"}, {"grants"}} {
		_, stderr, code := run(t, cmd...)
		if code != ExitError || !strings.Contains(stderr, "no kubeconfig: give --kubeconfig FILE, set KUBECONFIG, or write ~/.kube/config") || strings.Contains(stderr, "localhost:8080") {
			t.Errorf("%s with no kubeconfig: exit %d, %q", cmd[0], code, stderr)
		}
	}
}

// An argument that cannot name what a command asks about is refused before anything
// is read: the server given here does not exist, and the error must be about the
// argument, not about reaching it.
func TestMain_ArgumentsAreCheckedBeforeAnyAPICall(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"who-trusts", "old-ca.pem"}, `"old-ca.pem" is neither a file nor a SHA-256 in hex`},
		{[]string{"who-trusts", "abc123"}, `"abc123" is too short a prefix: give at least 12 hex digits`},
		{[]string{"who-trusts", strings.Repeat("a", 65)}, "has 65 hex digits; a SHA-256 has 64"},
		{[]string{"rotation", "workload"}, `SIGNER: Invalid value: "workload": must be a fully qualified domain and path`},
		{[]string{"rotation", "a/b", "c/d"}, "accepts at most 1 arg(s), received 2"},
		{[]string{"federation", "B Example!"}, `PEER "B Example!" is neither a FederatedTrustDomain's name`},
	} {
		_, stderr, code := run(t, append(tc.args, "--server", "https://127.0.0.1:1")...)
		if code != ExitError || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "127.0.0.1:1") {
			t.Errorf("%v: exit %d, %q; want the argument refused saying %q", tc.args, code, stderr, tc.want)
		}
	}
	// What names something passes the check (and then fails only on the server).
	for _, args := range [][]string{{"who-trusts", "abcdef012345"}, {"rotation", "trustsync.io/workload"}, {"federation", "b.example"}, {"federation", "under_score.example"}} {
		if _, stderr, _ := run(t, append(args, "--server", "https://127.0.0.1:1", "--request-timeout", "1s")...); !strings.Contains(stderr, "127.0.0.1:1") {
			t.Errorf("%v was refused before reaching the server: %q", args, stderr)
		}
	}
}

// A <TAB> against a cluster that cannot be read completes nothing and prints nothing
// but cobra's directive: the shell has no place for an error. Files stay offered where
// the word may be one (who-trusts' PEM file).
func TestMain_CompletionOfAnUnreachableClusterOffersNothing(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		directive string
	}{
		{[]string{"status", "-n", ""}, ":4"},
		{[]string{"rotation", ""}, ":4"},
		{[]string{"federation", ""}, ":4"},
		{[]string{"who-trusts", ""}, ":0"},
	} {
		// cobra's completion debugging writes to the process's standard error, not the
		// command's: read that.
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		saved := os.Stderr
		os.Stderr = w
		stdout, stderr, code := run(t, append([]string{"__complete", "--server", "https://127.0.0.1:1"}, tc.args...)...)
		os.Stderr = saved
		w.Close()
		direct, _ := io.ReadAll(r)
		if code != 0 || strings.TrimSpace(stdout) != tc.directive || strings.Contains(stderr+string(direct), "127.0.0.1") {
			t.Errorf("%v: exit %d, offered %q (want only directive %s), said %q", tc.args, code, stdout, tc.directive, stderr+string(direct))
		}
	}
}
