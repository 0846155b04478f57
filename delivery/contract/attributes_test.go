package contract

import (
	"reflect"
	"strings"
	"testing"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// What the injector writes into a CSI volume, the node agent reads back to the same
// Spec, over every shape the sidecar's arguments are tested with; the directories are
// the agent's.
func TestSpec_AttributesReadBackToTheSameSpec(t *testing.T) {
	for _, tc := range specs() {
		if tc.spec.Reload != nil && tc.spec.Reload.Signal != "" {
			continue // refused for node delivery: TestSpecFromAttributes_RefusesWhatTheAgentCannotDo
		}
		t.Run(tc.name, func(t *testing.T) {
			attrs := tc.spec.Attributes()
			stateDir := ""
			if tc.spec.Certificate != nil {
				stateDir = tc.spec.Certificate.StateDir
			}
			got, err := SpecFromAttributes(attrs, tc.spec.Dir, stateDir)
			if err != nil {
				t.Fatalf("the agent refuses what the injector renders, %q: %v", attrs, err)
			}
			if !reflect.DeepEqual(got, tc.spec) {
				t.Fatalf("round trip changed the spec\n attributes: %q\n got:  %#v\n want: %#v", attrs, got, tc.spec)
			}
			if again := got.Attributes(); !reflect.DeepEqual(again, attrs) {
				t.Fatalf("rendering the parsed spec gives other attributes:\n%q\n%q", again, attrs)
			}
		})
	}
}

func TestSpec_AttributesNameNoDirectory(t *testing.T) {
	s := Spec{Dir: "/trust", Sources: []v1alpha1.Source{{Name: "a", Path: "a.pem"}}, Certificate: &Certificate{Signer: "s", KeyType: DefaultKeyType, TrustDomain: "td", StateDir: "/state"}}
	attrs := s.Attributes()
	for _, name := range []string{FlagDir, FlagStateDir} {
		if v, ok := attrs[name]; ok {
			t.Errorf("attribute %q = %q: the agent chooses its directories, a pod must not", name, v)
		}
	}
	if attrs[FlagCertificate] != "true" {
		t.Errorf("attribute %q = %q, want \"true\"", FlagCertificate, attrs[FlagCertificate])
	}
}

func TestSpecFromAttributes_RefusesWhatTheAgentCannotDo(t *testing.T) {
	sources := `[{"name":"a","path":"a.pem"}]`
	tests := []struct {
		name    string
		attrs   map[string]string
		wantErr string
	}{
		{"an unknown attribute", map[string]string{FlagSources: sources, "bundle": "a"}, `unknown volume attribute "bundle"; the attributes are sources, certificate,`},
		{"the directory, which is the agent's", map[string]string{FlagSources: sources, FlagDir: "/etc"}, `unknown volume attribute "dir"`},
		{"the state directory, which is the agent's", map[string]string{FlagCertificate: "true", FlagStateDir: "/etc"}, `unknown volume attribute "state-dir"`},
		{"sources that do not parse", map[string]string{FlagSources: `[{"signer":"x"}]`}, `volume attributes: --sources: not a JSON list of sources: json: unknown field "signer"`},
		{"nothing to write", map[string]string{}, "nothing to write"},
		{"a reload signal", map[string]string{FlagSources: sources, FlagReloadSignal: "SIGHUP", FlagReloadContainer: "app"}, `volume attribute "reload-container": the node agent cannot signal a container's process`},
		{"a flag's value of the wrong type", map[string]string{FlagSources: sources, FlagExpiryWarningDays: "soon"}, `volume attribute "expiry-warning-days": invalid argument "soon"`},
		{"a reload URL off the pod", map[string]string{FlagSources: sources, FlagReloadURL: "http://10.0.0.1/r"}, "must be on the pod's loopback"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := SpecFromAttributes(tc.attrs, "/volume", "/state")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

// The kubelet adds the pod's identity and tokens to every publish request; they are
// not part of the Spec and not refused.
func TestSpecFromAttributes_IgnoresTheKubeletsOwn(t *testing.T) {
	attrs := map[string]string{FlagSources: `[{"name":"a","path":"a.pem"}]`,
		"csi.storage.k8s.io/pod.name": "web-1", "csi.storage.k8s.io/serviceAccount.tokens": `{}`, "csi.storage.k8s.io/ephemeral": "true"}
	if _, err := SpecFromAttributes(attrs, "/v", ""); err != nil {
		t.Fatal(err)
	}
}
