package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// `make demo` builds what the demo runs and nothing only the tests use: the demo's
// `hack/controlplane.sh` links etcd, the Kubernetes binaries and helm, `make push`'s
// `hack/controlplane.sh helm` links helm alone, and promtool, cosign, spire-server
// (a cold build's slowest after kube-apiserver), krew and local-kms come from
// `make test-tools`. The
// script runs for real against a cache of stand-ins, so nothing here is compiled.
func TestBuilds_EachTargetBuildsOnlyWhatItRuns(t *testing.T) {
	demo, err := os.ReadFile("../../hack/demo.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(demo), "\nhack/controlplane.sh\n") || strings.Contains(string(demo), "test-tools") {
		t.Fatal("hack/demo.sh no longer builds the control plane alone; this test reads what it does")
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{name: "the demo's control plane", want: []string{"etcd", "helm", "kube-apiserver", "kube-controller-manager", "kubectl"}},
		{name: "make push's helm", args: []string{"helm"}, want: []string{"helm"}},
		{name: "the tests' tools", args: []string{"test-tools"}, want: []string{"cosign", "kubectl-krew", "local-kms", "promtool", "spire-server"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache, bin := t.TempDir(), t.TempDir()
			env := append(os.Environ(), "TRUSTSYNC_CACHE="+cache, "TRUSTSYNC_BIN="+bin)
			printDirs := exec.Command("../../hack/controlplane.sh", "--print")
			printDirs.Env = env
			dirs, err := printDirs.Output()
			if err != nil {
				t.Fatalf("hack/controlplane.sh --print: %v", err)
			}
			// A stand-in for every binary the script could build: had it tried to
			// build one, the stand-in is what it would find, so only links count.
			for _, dir := range strings.Fields(string(dirs)) {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "helm", "promtool", "cosign", "spire-server", "kubectl-krew", "local-kms"} {
					if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
						t.Fatal(err)
					}
				}
			}
			run := exec.Command("../../hack/controlplane.sh", tc.args...)
			run.Env = env
			if out, err := run.CombinedOutput(); err != nil {
				t.Fatalf("hack/controlplane.sh %v: %v\n%s", tc.args, err, out)
			}
			entries, err := os.ReadDir(bin)
			if err != nil {
				t.Fatal(err)
			}
			var linked []string
			for _, e := range entries {
				linked = append(linked, e.Name())
			}
			if !slices.Equal(linked, tc.want) {
				t.Errorf("hack/controlplane.sh %v linked %v, want %v", tc.args, linked, tc.want)
			}
		})
	}
}
