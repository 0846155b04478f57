package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
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
	loop := regexp.MustCompile(`for b in ([a-z -]+); do`).FindStringSubmatch(df)
	if loop == nil {
		t.Fatal("cannot find the Dockerfile's build loop")
	}
	built := strings.Fields(loop[1])
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
		// What make build writes for the chart in the tree: never in a package.
		BuildVersionFile: "1.2.3-dev.4.gabcdef0\n",
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
	zr, err := gzip.NewReader(bytes.NewReader(x))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for tr := tar.NewReader(zr); ; {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if slices.Contains(names, "demo/"+BuildVersionFile) || !slices.Contains(names, "demo/files/rules/rules.yaml") {
		t.Errorf("the package holds %v: want the chart's files without %s", names, BuildVersionFile)
	}
	if err := os.WriteFile(filepath.Join(chart, ".helmignore"), []byte("*.md\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := packageChart(chart, one); err == nil || !strings.Contains(err.Error(), ".helmignore") {
		t.Errorf("a .helmignore was not refused: %v", err)
	}
}

func TestReleaseIndex_OneImagePerPlatformTheSameDigestEachTime(t *testing.T) {
	bins := map[string]func() ([]entry, v1.Config, error){}
	for _, arch := range Platforms {
		dir, exe := t.TempDir(), tinyBinary(t, "linux", arch)
		for _, b := range Binaries {
			if err := os.WriteFile(filepath.Join(dir, b), exe, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		bins[arch] = func() ([]entry, v1.Config, error) { return trustsyncImage(dir) }
	}
	first, err := releaseIndex(bins, "trustsync", "1.2.3", "abc")
	if err != nil {
		t.Fatal(err)
	}
	again, err := releaseIndex(bins, "trustsync", "1.2.3", "abc")
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

// An image is stamped with the architecture its binaries are built for, never the
// host's, and a binary a Linux node cannot run (built on a Mac, or for another
// architecture than the rest) is refused by name before any image is written.
func TestWrite_StampsTheArchitectureTheBinariesAreBuiltFor(t *testing.T) {
	linuxAMD64, linuxARM64, darwinARM64 := tinyBinary(t, "linux", "amd64"), tinyBinary(t, "linux", "arm64"), tinyBinary(t, "darwin", "arm64")
	exe := func(name string, data []byte) entry { return entry{name: name, mode: 0o755, data: data} }

	for _, tc := range []struct {
		name    string
		files   []entry
		want    string
		wantErr string
	}{
		{name: "linux/arm64 binaries make an arm64 image", files: []entry{exe("a", linuxARM64), exe("b", linuxARM64)}, want: "arm64"},
		{name: "linux/amd64 binaries make an amd64 image", files: []entry{exe("a", linuxAMD64)}, want: "amd64"},
		{name: "data files and links do not count", files: []entry{{name: "etc/passwd", mode: 0o644, data: []byte("root")}, {name: "sh", link: "a"}, exe("a", linuxARM64)}, want: "arm64"},
		{name: "a Mach-O binary is refused by name", files: []entry{exe("trustsync-webhook", darwinARM64)}, wantErr: "trustsync-webhook: not a Linux (ELF) executable: build it with GOOS=linux"},
		{name: "binaries of two architectures are refused", files: []entry{exe("a", linuxAMD64), exe("b", linuxARM64)}, wantErr: "a is built for linux/amd64 and b for linux/arm64"},
		{name: "no executable at all is refused", files: []entry{{name: "etc/passwd", mode: 0o644}}, wantErr: "no executable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "image.tar")
			arch, err := write("example.test/trustsync:dev", out, tc.files, v1.Config{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
				}
				if _, statErr := os.Stat(out); statErr == nil {
					t.Error("an image was written anyway")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			img, err := tarball.ImageFromPath(out, nil)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if arch != tc.want || cf.OS != "linux" || cf.Architecture != tc.want {
				t.Errorf("write says %s and stamps %s/%s, want linux/%s", arch, cf.OS, cf.Architecture, tc.want)
			}
		})
	}
}

// tinyBinary is an empty Go program built for goos/goarch: a real executable of that
// platform, for the tool to read the architecture of.
func tinyBinary(t *testing.T, goos, goarch string) []byte {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "exe")
	cmd := exec.Command("go", "build", "-o", out, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GO111MODULE=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build for %s/%s: %v\n%s", goos, goarch, err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
