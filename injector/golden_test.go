package injector

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/policy"
)

var update = flag.Bool("update", false, "rewrite the golden .out.yaml files from the current output")

// goldenInput is one case: a pod, where it is created, and how the injector is set up.
type goldenInput struct {
	Namespace            string            `json:"namespace"`
	NamespaceAnnotations map[string]string `json:"namespaceAnnotations,omitempty"`
	DefaultMode          v1alpha1.Mode     `json:"defaultMode,omitempty"`
	// NativeAPIs are what the API server serves; unset means both native APIs.
	NativeAPIs *NativeAPIs `json:"nativeAPIs,omitempty"`
	// NodeAgent says the agent's CSIDriver is installed; unset means it is.
	NodeAgent *bool `json:"nodeAgent,omitempty"`
	// ImagePullSecrets are the sidecar image's pull Secrets.
	ImagePullSecrets []string   `json:"imagePullSecrets,omitempty"`
	Pod              corev1.Pod `json:"pod"`
}

// config is the injector's configuration for a case.
func (in goldenInput) config() Config {
	apis := NativeAPIs{ClusterTrustBundles: true, PodCertificates: true}
	if in.NativeAPIs != nil {
		apis = *in.NativeAPIs
	}
	return Config{Image: "registry.example/trustsync:test", Namespace: "trustsync-system", DefaultMode: in.DefaultMode, Policy: goldenPolicy, NativeAPIs: apis,
		NodeAgent: in.NodeAgent == nil || *in.NodeAgent, ImagePullSecrets: in.ImagePullSecrets}
}

// goldenOutput is what the injector made of it.
type goldenOutput struct {
	Skipped string      `json:"skipped,omitempty"`
	Refused string      `json:"refused,omitempty"`
	Pod     *corev1.Pod `json:"pod,omitempty"`
	// Warnings are what the pod's author is told at admission.
	Warnings []string `json:"warnings,omitempty"`
}

var goldenPolicy = func() *policy.Policy {
	p, err := policy.Parse([]byte("apiVersion: trustsync.io/v1alpha1\nkind: Policy\nsigners:\n- signerName: trustsync.io/workload\n  trustDomain: example.org\n"))
	if err != nil {
		panic(err)
	}
	return p
}()

// TestInject_Golden runs every testdata/<case>.in.yaml through Inject and compares the
// result with <case>.out.yaml. Run with -update to rewrite the outputs, then read the
// diff: it is the behaviour change.
func TestInject_Golden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			var input goldenInput
			if err := yaml.UnmarshalStrict(data, &input); err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			got := run(t, &input.Pod, input.Namespace, input.NamespaceAnnotations, input.config())
			out, err := yaml.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(in, ".in.yaml") + ".out.yaml"
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(out, want) {
				t.Errorf("%s differs from the injector's output (run with -update and read the diff):\n%s", golden, out)
			}
		})
	}
}

// run injects pod and, when it was injected, checks the invariants every injection
// must keep before returning the outcome.
func run(t *testing.T, pod *corev1.Pod, namespace string, nsAnnotations map[string]string, cfg Config) goldenOutput {
	t.Helper()
	res, err := Inject(pod, namespace, nsAnnotations, cfg)
	if err != nil {
		if _, ok := err.(*RefusalError); !ok {
			t.Fatalf("Inject returned %T, want a *RefusalError: %v", err, err)
		}
		return goldenOutput{Refused: err.Error()}
	}
	if res.Skipped != "" {
		if len(res.Patch) > 0 {
			t.Fatalf("skipped (%s) with a patch", res.Skipped)
		}
		return goldenOutput{Skipped: res.Skipped}
	}
	for _, op := range res.Patch {
		if op.Op != "add" {
			t.Fatalf("patch has a %q operation; the injector only adds", op.Op)
		}
	}
	injected, err := res.Apply(pod)
	if err != nil {
		t.Fatalf("the patch does not apply: %v", err)
	}
	again, err := Inject(injected, namespace, nsAnnotations, cfg)
	if err != nil || again.Skipped != SkipAlreadyInjected {
		t.Fatalf("injecting the injected pod again = %+v, %v; want it left alone", again, err)
	}
	return goldenOutput{Pod: injected, Warnings: res.Warnings}
}
