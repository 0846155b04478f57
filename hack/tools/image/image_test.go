package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The image built here and the Dockerfile's must be the same image for a user: the
// same binaries at the root, the same non-root user, the same entrypoint. The
// Dockerfile is read as text, since no container engine runs here to build it.
func TestDockerfile_DescribesTheImageThisToolBuilds(t *testing.T) {
	data, err := os.ReadFile("../../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	final := df[strings.LastIndex(df, "\nFROM "):]
	if !strings.Contains(final, "USER "+NonRootUser+"\n") {
		t.Errorf("the Dockerfile's final stage does not run as %s, which the built image does", NonRootUser)
	}
	if !strings.Contains(final, `ENTRYPOINT ["`+Entrypoint+`"]`) {
		t.Errorf("the Dockerfile's entrypoint is not %s", Entrypoint)
	}
	loop := regexp.MustCompile(`for b in ([a-z ]+); do`).FindStringSubmatch(df)
	if loop == nil {
		t.Fatal("cannot find the Dockerfile's build loop")
	}
	var built []string
	for _, b := range strings.Fields(loop[1]) {
		built = append(built, "trustsync-"+b)
	}
	if strings.Join(built, " ") != strings.Join(Binaries, " ") {
		t.Errorf("the Dockerfile builds %v, this tool packs %v", built, Binaries)
	}
	if !strings.Contains(final, "COPY --from=build /out/ /") {
		t.Error("the Dockerfile no longer copies the binaries to the image's root")
	}
}

func TestTarOf_FixedTimesAndOwnersGiveTheSameBytes(t *testing.T) {
	files := func() []entry {
		return []entry{{name: "b", mode: 0o755, data: []byte("x")}, {name: "a", dir: true, mode: 0o755}, {name: "c", link: "b"}}
	}
	one, err := tarOf(files())
	if err != nil {
		t.Fatal(err)
	}
	two, err := tarOf(files())
	if err != nil {
		t.Fatal(err)
	}
	if string(one) != string(two) {
		t.Fatal("the same files gave different layers")
	}
}

func TestPackageChart_TheSameChartGivesTheSameBytesUnderItsName(t *testing.T) {
	chart := t.TempDir()
	for name, data := range map[string]string{
		"Chart.yaml":             "apiVersion: v2\nname: demo\nversion: 1.2.3\n",
		"values.yaml":            "a: 1\n",
		"templates/a.yaml":       "kind: ConfigMap\n",
		"crds/b.yaml":            "kind: CustomResourceDefinition\n",
		"files/rules/rules.yaml": "groups: []\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(chart, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(chart, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	one, two := t.TempDir(), t.TempDir()
	a, err := packageChart(chart, one)
	if err != nil {
		t.Fatal(err)
	}
	// Other times and modes on disk change nothing in the package.
	if err := os.Chtimes(filepath.Join(chart, "values.yaml"), time.Now(), time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	b, err := packageChart(chart, two)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(a) != "demo-1.2.3.tgz" {
		t.Errorf("packaged as %s, want demo-1.2.3.tgz", filepath.Base(a))
	}
	x, _ := os.ReadFile(a)
	y, _ := os.ReadFile(b)
	if !bytes.Equal(x, y) {
		t.Error("two packagings of one chart differ")
	}
	if err := os.WriteFile(filepath.Join(chart, ".helmignore"), []byte("*.md\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := packageChart(chart, one); err == nil || !strings.Contains(err.Error(), ".helmignore") {
		t.Errorf("a .helmignore was not refused: %v", err)
	}
}

func TestReleaseIndex_OneImagePerPlatformTheSameDigestEachTime(t *testing.T) {
	bins := map[string]string{}
	for _, arch := range Platforms {
		dir := t.TempDir()
		for _, b := range Binaries {
			if err := os.WriteFile(filepath.Join(dir, b), []byte(b+" for "+arch), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		bins[arch] = dir
	}
	first, err := releaseIndex(bins, "1.2.3", "abc")
	if err != nil {
		t.Fatal(err)
	}
	again, err := releaseIndex(bins, "1.2.3", "abc")
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := first.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("the same binaries gave indexes %s and %s", d1, d2)
	}
	m, err := first.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, desc := range m.Manifests {
		platforms = append(platforms, desc.Platform.String())
	}
	if strings.Join(platforms, " ") != "linux/amd64 linux/arm64" || m.Annotations["org.opencontainers.image.version"] != "1.2.3" {
		t.Errorf("index of %v, annotations %v", platforms, m.Annotations)
	}
}
