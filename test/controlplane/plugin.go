package controlplane

import (
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// Plugin runs kubectl-trustsync, built as make build builds it, as the admin.
type Plugin struct{ bin, kubeconfig string }

// NewPlugin builds the plugin and writes the admin's kubeconfig for it.
func NewPlugin(t testing.TB, cp *ControlPlane) Plugin {
	t.Helper()
	return NewPluginAs(t, cp.AdminConfig())
}

// NewPluginAs builds the plugin and writes a kubeconfig of cfg's user for it (one of
// UserConfig's, to run it as a tenant would).
func NewPluginAs(t testing.TB, cfg *rest.Config) Plugin {
	t.Helper()
	bin, err := BuildBinary("kubectl-trustsync")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := WriteKubeconfig(kubeconfig, cfg); err != nil {
		t.Fatal(err)
	}
	return Plugin{bin: bin, kubeconfig: kubeconfig}
}

// Run returns what the plugin printed (both streams) and its exit code.
func (p Plugin) Run(t testing.TB, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(p.bin, append(args, "--kubeconfig", p.kubeconfig)...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// Output runs the plugin and returns its standard output and error apart, and its
// exit code: for what is piped on, as convert's YAML is into kubectl apply.
func (p Plugin) Output(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(p.bin, append(args, "--kubeconfig", p.kubeconfig)...)
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return string(out), errOut.String(), cmd.ProcessState.ExitCode()
}

// JSON runs the plugin with -o json, wants exit code code, and decodes its output
// into v.
func (p Plugin) JSON(t testing.TB, v any, code int, args ...string) {
	t.Helper()
	cmd := exec.Command(p.bin, append(args, "--kubeconfig", p.kubeconfig, "-o", "json")...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	if got := cmd.ProcessState.ExitCode(); got != code {
		t.Fatalf("kubectl trustsync %v: exit %d, want %d; it said %s%s", args, got, code, out, stderr.String())
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("kubectl trustsync %v -o json: %v\n%s", args, err, out)
	}
}

// Complete asks the plugin what the shell should offer for the last of args (cobra's
// __complete, as kubectl_complete-trustsync and the shells' scripts ask it): the
// values offered, each line as printed, and the directive's number.
func (p Plugin) Complete(t testing.TB, args ...string) (values []string, directive string) {
	t.Helper()
	// The word completed is the last argument: the kubeconfig goes first.
	out, err := exec.Command(p.bin, append([]string{"__complete", "--kubeconfig", p.kubeconfig}, args...)...).Output()
	if err != nil {
		t.Fatalf("kubectl-trustsync __complete %v: %v", args, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}
