package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// docFiles are README.md and every page under docs/.
func docFiles(t *testing.T) map[string]string {
	t.Helper()
	files, _ := filepath.Glob("../../docs/*.md")
	out := map[string]string{}
	for _, f := range append(files, "../../README.md") {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = string(data)
	}
	return out
}

// Every signer a doc's annotation asks trust of exists where the doc puts it: one the
// chart's default policy runs, the federation's imported bundles' signer, or one a
// policy example in the docs adds. A signer no one runs would leave the reader's pod
// with no bundle at all.
func TestDocs_EverySignerAnExampleAsksForExists(t *testing.T) {
	raw, err := os.ReadFile("../../charts/trustsync/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Policy struct {
			Signers []struct {
				SignerName string `json:"signerName"`
			} `json:"signers"`
		} `json:"policy"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	known := []string{v1alpha1.FederatedSignerName}
	for _, s := range values.Policy.Signers {
		known = append(known, s.SignerName)
	}
	docs := docFiles(t)
	added := regexp.MustCompile(`(?m)^\s*-\s+signerName:\s+([a-z0-9.-]+/[a-z0-9.-]+)`)
	for _, text := range docs {
		for _, m := range added.FindAllStringSubmatch(text, -1) {
			known = append(known, m[1])
		}
	}
	asked := regexp.MustCompile(`trustsync\.io/signer-name:\s+"?([a-z0-9.-]+/[a-z0-9.-]+)`)
	checked := 0
	for name, text := range docs {
		for _, m := range asked.FindAllStringSubmatch(text, -1) {
			checked++
			if !slices.Contains(known, m[1]) {
				t.Errorf("%s asks for signer %s, which neither the chart's policy nor any policy example in the docs runs", name, m[1])
			}
		}
	}
	if checked < 3 {
		t.Fatalf("checked %d signer annotations", checked)
	}
}

// A file the docs tell the reader to apply or pass with -f is in the tree.
func TestDocs_EveryExampleFileTheyNameExists(t *testing.T) {
	ref := regexp.MustCompile(`\bdocs/examples/[a-z0-9.-]+\.ya?ml\b`)
	checked := 0
	for name, text := range docFiles(t) {
		for _, f := range ref.FindAllString(text, -1) {
			checked++
			if _, err := os.Stat(filepath.Join("../..", f)); err != nil {
				t.Errorf("%s names %s: %v", name, f, err)
			}
		}
	}
	examples, _ := filepath.Glob("../../docs/examples/*.yaml")
	for _, e := range examples {
		rel := "docs/examples/" + filepath.Base(e)
		cited := false
		for _, text := range docFiles(t) {
			cited = cited || strings.Contains(text, rel) || strings.Contains(text, "examples/"+filepath.Base(e))
		}
		if !cited {
			t.Errorf("%s is in no doc: say what it is for, or remove it", rel)
		}
	}
	if checked < 3 {
		t.Fatalf("checked %d example files", checked)
	}
}
