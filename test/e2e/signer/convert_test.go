package signer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/x509roots/fallback/bundle"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	"github.com/trustsync/trustsync/agent/holdings"
	"github.com/trustsync/trustsync/signer/targets"
	"github.com/trustsync/trustsync/test/controlplane"
)

// trustManagerVersion is the trust-manager release whose documented example Bundles
// the conversion is checked against, read from its module as the Go module proxy
// serves it (never copied into this repository).
const trustManagerVersion = "v0.25.0"

// trustManagerExamples are the Bundles trust-manager's README documents, each YAML
// block that declares one.
func trustManagerExamples(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/cert-manager/trust-manager@"+trustManagerVersion)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download trust-manager@%s: %v\n%s", trustManagerVersion, err, out)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download: %v\n%s", err, out)
	}
	readme, err := os.ReadFile(filepath.Join(mod.Dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var docs bytes.Buffer
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(readme, -1) {
		if bytes.Contains(m[1], []byte("kind: Bundle")) {
			docs.WriteString("---\n")
			docs.Write(m[1])
		}
	}
	if docs.Len() == 0 {
		t.Fatalf("trust-manager %s's README documents no Bundle", trustManagerVersion)
	}
	return docs.Bytes()
}

// kubectl trustsync convert turns the Bundles trust-manager documents into objects
// that, applied, write what trust-manager says its Bundle writes: a ConfigMap named
// after the Bundle, with the key it names, holding the public roots, in every
// namespace.
func TestConvert_TrustManagersDocumentedBundlesWriteWhatItsDocsSay(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	examples := filepath.Join(t.TempDir(), "bundles.yaml")
	if err := os.WriteFile(examples, trustManagerExamples(t), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := controlplane.NewPlugin(t, cp).Run(t, "convert", "-f", examples)
	if code != 0 {
		t.Fatalf("convert exits %d for trust-manager's documented Bundles; it said:\n%s", code, out)
	}
	dyn := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(targets.Resource)
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	var names []string
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("convert printed what does not decode: %v\n%s", err, out)
		}
		if obj.GetKind() != targets.Kind {
			t.Fatalf("convert printed a %s for a Bundle of the public roots alone", obj.GetKind())
		}
		if _, err := dyn.Create(ctx, &obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, obj.GetName())
		t.Cleanup(func() { _ = dyn.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{}) })
	}
	if !slices.Equal(names, []string{"trust-manager-bundle"}) {
		t.Fatalf("convert made %v of the README's Bundle trust-manager-bundle", names)
	}

	var roots []string
	for r := range bundle.Roots() {
		if r.Constraint == nil {
			roots = append(roots, holdings.AnchorID(r.Certificate))
		}
	}
	slices.Sort(roots)
	client := kube(t, cp.AdminConfig())
	namespaces, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range namespaces.Items {
		if ns.Status.Phase == "Terminating" {
			continue
		}
		waitFor(t, "ConfigMap "+ns.Name+"/trust-manager-bundle holding the public roots at bundle.pem", func() bool {
			cm, err := client.CoreV1().ConfigMaps(ns.Name).Get(ctx, "trust-manager-bundle", metav1.GetOptions{})
			if err != nil {
				return false
			}
			got, err := holdings.Anchors([]byte(cm.Data["bundle.pem"]))
			return err == nil && slices.Equal(got, roots)
		})
	}
	t.Logf("%d public roots in trust-manager-bundle/bundle.pem in all %d namespaces", len(roots), len(namespaces.Items))
}
