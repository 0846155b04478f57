// Package release tests a release as users receive it: `make release`'s dist/ is the
// same bytes for the same commit, every artifact agrees on the version, and `make
// push` puts the images (every platform, one index each) and the chart (OCI) into a real
// registry, from which helm installs the chart into a real API server.
package release

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/trustsync/trustsync/test/controlplane"
)

var planes controlplane.Shared

func TestMain(m *testing.M) {
	planes.Main(m, func() {
		// The shared release is some hundred MB: not left behind.
		if sharedDir != "" {
			_ = os.RemoveAll(sharedDir)
		}
	})
}

var root, _ = filepath.Abs("../../..")

func version(t *testing.T) string {
	t.Helper()
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(v))
}

// release runs hack/release.sh (what make release runs) into dist.
func release(dist string) error {
	cmd := exec.Command(filepath.Join(root, "hack", "release.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "DIST="+dist)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make release: %w\n%s", err, out)
	}
	return nil
}

// shared is one release of the tree, made once for the package's tests; every test
// that needs it sees the same error when it could not be made.
var shared = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "trustsync-dist-")
	if err != nil {
		return "", err
	}
	sharedDir = dir
	return dir, release(dir)
})

// sharedDir is where shared made the release, once it did: TestMain removes it.
var sharedDir string

func dist(t *testing.T) string {
	t.Helper()
	dir, err := shared()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRelease_TheSameCommitGivesTheSameBytesAndSumsThemAll(t *testing.T) {
	first := dist(t)
	second := t.TempDir()
	if err := release(second); err != nil {
		t.Fatal(err)
	}
	a, err := os.ReadFile(filepath.Join(first, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(second, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("two releases of one tree differ:\n%s\n---\n%s", a, b)
	}
	v := version(t)
	var want []string
	for _, p := range pluginPlatforms {
		want = append(want, pluginArchive(v, p))
	}
	want = append(want, "krew-trustsync.yaml",
		"sbom/kubectl-trustsync.cdx.json", "sbom/trustsync-agent.cdx.json", "sbom/trustsync-controller.cdx.json", "sbom/trustsync-sidecar.cdx.json",
		"sbom/trustsync-signer-pkcs11.cdx.json", "sbom/trustsync-signer.cdx.json", "sbom/trustsync-webhook.cdx.json",
		"trustsync-"+v+".tgz", "trustsync-crds.yaml")
	for _, img := range releasedImages(v) {
		want = append(want, img.file)
	}
	slices.Sort(want)
	var listed []string
	for _, line := range strings.Split(strings.TrimSpace(string(a)), "\n") {
		sum, file, _ := strings.Cut(line, "  ")
		listed = append(listed, file)
		data, err := os.ReadFile(filepath.Join(first, file))
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
			t.Errorf("SHA256SUMS says %s for %s, which sums to %x", sum, file, got)
		}
	}
	if !slices.Equal(listed, want) {
		t.Errorf("SHA256SUMS lists %v, want %v", listed, want)
	}
}

// Every artifact says the release's version: the chart, the image's index and
// reference, the plugin, each SBOM.
func TestRelease_EveryArtifactAgreesOnTheVersion(t *testing.T) {
	d, v := dist(t), version(t)
	bin, err := controlplane.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	chart, err := exec.Command(filepath.Join(bin, "helm"), "show", "chart", filepath.Join(d, "trustsync-"+v+".tgz")).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(chart), "\nversion: "+v+"\n") || !strings.Contains(string(chart), "appVersion: "+v+"\n") {
		t.Errorf("the packaged chart is not version %s:\n%s", v, chart)
	}
	if out, err := exec.Command(filepath.Join(bin, "helm"), "lint", "--strict", filepath.Join(d, "trustsync-"+v+".tgz")).CombinedOutput(); err != nil {
		t.Errorf("helm lint of the package: %v\n%s", err, out)
	}
	plugin := filepath.Join(untarPlugin(t, filepath.Join(d, pluginArchive(v, "linux/"+runtime.GOARCH))), "kubectl-trustsync")
	if out, err := exec.Command(plugin, "version", "--client").Output(); err != nil || strings.TrimSpace(string(out)) != "kubectl-trustsync "+v {
		t.Errorf("the released plugin says %q (%v), want kubectl-trustsync %s", out, err, v)
	}

	for _, b := range []string{"agent", "controller", "sidecar", "signer", "signer-pkcs11", "webhook"} {
		data, err := os.ReadFile(filepath.Join(d, "sbom", "trustsync-"+b+".cdx.json"))
		if err != nil {
			t.Fatal(err)
		}
		var sbom struct {
			BOMFormat string `json:"bomFormat"`
			Metadata  struct {
				Component struct{ Version string }
			}
			Components []struct{ Name, Version string }
		}
		if err := json.Unmarshal(data, &sbom); err != nil || sbom.BOMFormat != "CycloneDX" {
			t.Fatalf("sbom of %s: %v", b, err)
		}
		if sbom.Metadata.Component.Version != "v"+v || !slices.ContainsFunc(sbom.Components, func(c struct{ Name, Version string }) bool {
			return c.Name == "k8s.io/client-go"
		}) {
			t.Errorf("sbom of %s: version %q, %d components, want v%s listing k8s.io/client-go", b, sbom.Metadata.Component.Version, len(sbom.Components), v)
		}
	}
}

// releasedImage is one image archive of a release, and what its tag promises.
type releasedImage struct {
	file, ref  string
	entrypoint string
	// fips: every binary built with Go's FIPS 140-3 module; pkcs11: the signer with
	// cgo, on the glibc base.
	fips, pkcs11 bool
}

func releasedImages(v string) []releasedImage {
	var images []releasedImage
	for _, pkcs11 := range []bool{false, true} {
		for _, fips := range []bool{false, true} {
			name, entrypoint, tag := "trustsync", "/trustsync-webhook", "v"+v
			if pkcs11 {
				name, entrypoint = "trustsync-signer-pkcs11", "/trustsync-signer"
			}
			if fips {
				tag += "-fips"
			}
			images = append(images, releasedImage{file: name + "-image-" + tag + ".oci.tar", ref: "ghcr.io/trustsync/" + name + ":" + tag,
				entrypoint: entrypoint, fips: fips, pkcs11: pkcs11})
		}
	}
	return images
}

// Each image of a release is what its name and tag say, on both platforms: the chart's
// default reference, the release's version, binaries for the platform (built with Go's
// FIPS 140-3 module exactly when tagged -fips), and for the PKCS#11 signer a cgo binary
// whose dynamic loader the image holds, on a base that names its Debian packages.
func TestRelease_EachImageHoldsWhatItsTagSays(t *testing.T) {
	d, v := dist(t), version(t)
	for _, want := range releasedImages(v) {
		t.Run(want.file, func(t *testing.T) {
			idx, ref := readLayout(t, filepath.Join(d, want.file))
			if ref != want.ref {
				t.Errorf("the layout names the image %q, want %s", ref, want.ref)
			}
			m, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Annotations["org.opencontainers.image.version"]; got != strings.TrimPrefix(want.ref[strings.LastIndex(want.ref, ":")+1:], "v") {
				t.Errorf("the index's version annotation is %q", got)
			}
			var platforms []string
			for _, desc := range m.Manifests {
				platforms = append(platforms, desc.Platform.String())
				img, err := idx.Image(desc.Digest)
				if err != nil {
					t.Fatal(err)
				}
				cf, err := img.ConfigFile()
				if err != nil {
					t.Fatal(err)
				}
				if cf.Architecture != desc.Platform.Architecture || cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{want.entrypoint}) {
					t.Errorf("image for %s: architecture %s, user %q, entrypoint %v", desc.Platform, cf.Architecture, cf.Config.User, cf.Config.Entrypoint)
				}
				if packages := cf.Config.Labels["io.trustsync.base.packages"]; want.pkcs11 != strings.Contains(packages, "libc6=") {
					t.Errorf("image for %s: base packages %q", desc.Platform, packages)
				}
				checkBinaries(t, img, desc.Platform.Architecture, want)
			}
			if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
				t.Errorf("the index holds %v, want linux/amd64 and linux/arm64", platforms)
			}
		})
	}
}

// checkBinaries reads img's one layer: every trustsync binary is an ELF for arch built
// as want says, and a dynamically linked one finds its loader in the image.
func checkBinaries(t *testing.T, img v1.Image, arch string, want releasedImage) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("want one layer, got %d (%v)", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files, links := map[string][]byte{}, map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeSymlink:
			links["/"+h.Name] = h.Linkname
		case tar.TypeReg:
			if files["/"+h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	machine := map[string]elf.Machine{"arm64": elf.EM_AARCH64, "amd64": elf.EM_X86_64}[arch]
	seen := 0
	for name, data := range files {
		if !strings.HasPrefix(name, "/trustsync-") && name != "/kubectl-trustsync" {
			continue
		}
		seen++
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil || f.Machine != machine {
			t.Errorf("%s for %s is not a linux/%s ELF binary (%v)", name, arch, arch, err)
			continue
		}
		info, err := buildinfo.Read(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		if fips := strings.HasPrefix(settings["GOFIPS140"], "v1.0.0"); fips != want.fips {
			t.Errorf("%s for %s: GOFIPS140=%q, want FIPS 140-3 %v", name, arch, settings["GOFIPS140"], want.fips)
		}
		if cgo := settings["CGO_ENABLED"] == "1"; cgo != want.pkcs11 {
			t.Errorf("%s for %s: CGO_ENABLED=%q", name, arch, settings["CGO_ENABLED"])
		}
		interp := ""
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b, _ := io.ReadAll(p.Open())
				interp = strings.TrimRight(string(b), "\x00")
			}
		}
		if want.pkcs11 {
			if _, ok := files[resolve(interp, links)]; interp == "" || !ok {
				t.Errorf("%s for %s loads with %q, which the image does not hold", name, arch, interp)
			}
		} else if interp != "" {
			t.Errorf("%s for %s is linked dynamically (%s)", name, arch, interp)
		}
	}
	if wantSeen := map[bool]int{false: 6, true: 1}[want.pkcs11]; seen != wantSeen {
		t.Errorf("the %s image holds %d trustsync binaries, want %d", arch, seen, wantSeen)
	}
}

// resolve follows the image's symlinks from name.
func resolve(name string, links map[string]string) string {
	for i := 0; i < 8; i++ {
		target, ok := links[name]
		if !ok {
			return name
		}
		if !strings.HasPrefix(target, "/") {
			target = filepath.Join(filepath.Dir(name), target)
		}
		name = target
	}
	return name
}

// readLayout opens a layout tarball: its one index, and the reference it is named by.
func readLayout(t *testing.T, archive string) (v1.ImageIndex, string) {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xf", archive, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("untar %s: %v %s", archive, err, out)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := outer.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("the layout holds %d entries (%v), want one index", len(m.Manifests), err)
	}
	idx, err := outer.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx, m.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
}

// make push puts the release into a real registry (go-containerregistry's, over TLS
// with a CA of its own, as a private registry is); the chart installs from it with
// helm install oci://, naming the pushed image.
func TestRelease_PushedToARegistryTheChartInstallsFromOCI(t *testing.T) {
	d, v := dist(t), version(t)
	reg := controlplane.StartRegistry(t)
	host, caFile, ca := reg.Host, reg.CAFile, reg.CA
	keys := t.TempDir()
	image := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", append([]string{"run", "."}, args...)...)
		cmd.Dir, cmd.Env = filepath.Join(root, "hack", "tools", "image"), append(os.Environ(), "COSIGN_PASSWORD=release-test")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("image %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	image("keygen", "--out", keys)
	env := append(os.Environ(), "DIST="+d, "SSL_CERT_FILE="+caFile, "COSIGN_KEY="+filepath.Join(keys, "cosign.key"), "COSIGN_PASSWORD=release-test",
		"HELM_REGISTRY_CONFIG="+filepath.Join(t.TempDir(), "registry.json"), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir())

	push := exec.Command(filepath.Join(root, "hack", "push.sh"), host+"/trustsync")
	push.Dir, push.Env = root, env
	out, err := push.CombinedOutput()
	if err != nil {
		t.Fatalf("make push: %v\n%s", err, out)
	}
	// The release was made from this tree: pushed as it is, not made again.
	if !strings.Contains(string(out), "is a release of this tree: pushing it as it is") {
		t.Errorf("make push did not reuse the release of this tree:\n%s", out)
	}

	// The registry holds each of the release's indexes, byte for byte.
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	var signed []string
	for _, img := range releasedImages(v) {
		local, _ := readLayout(t, filepath.Join(d, img.file))
		want, _ := local.Digest()
		pushedAs := host + "/trustsync/" + strings.TrimPrefix(img.ref, "ghcr.io/trustsync/")
		ref, err := name.ParseReference(pushedAs)
		if err != nil {
			t.Fatal(err)
		}
		pushed, err := remote.Index(ref, remote.WithTransport(tr))
		if err != nil {
			t.Fatalf("the registry has no %s: %v", ref, err)
		}
		if got, _ := pushed.Digest(); got != want {
			t.Errorf("the registry's %s is %s, the release's %s", pushedAs, got, want)
		}
		signed = append(signed, pushedAs)
	}

	// cosign itself verifies the image's and the chart's signatures with the public
	// key, and refuses them with another.
	other := t.TempDir()
	image("keygen", "--out", other)
	for _, signed := range append(signed, host+"/trustsync/charts/trustsync:"+v) {
		verify := func(pub string) ([]byte, error) {
			cmd := exec.Command(filepath.Join(bin(t), "cosign"), "verify", "--key", pub, "--insecure-ignore-tlog=true", signed)
			cmd.Env = env
			return cmd.CombinedOutput()
		}
		if out, err := verify(filepath.Join(keys, "cosign.pub")); err != nil {
			t.Errorf("cosign verify %s: %v\n%s", signed, err, out)
		}
		if _, err := verify(filepath.Join(other, "cosign.pub")); err == nil {
			t.Errorf("cosign verify %s with another key succeeded", signed)
		}
	}
	// And a release's files, signed as cosign sign-blob signs them.
	sums := filepath.Join(t.TempDir(), "SHA256SUMS")
	data, err := os.ReadFile(filepath.Join(d, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sums, data, 0o644); err != nil {
		t.Fatal(err)
	}
	image("sign-blob", "--key", filepath.Join(keys, "cosign.key"), sums)
	if out, err := exec.Command(filepath.Join(bin(t), "cosign"), "verify-blob", "--key", filepath.Join(keys, "cosign.pub"),
		"--signature", sums+".sig", "--insecure-ignore-tlog=true", sums).CombinedOutput(); err != nil {
		t.Errorf("cosign verify-blob SHA256SUMS: %v\n%s", err, out)
	}

	// helm install from the registry, as a user of a private registry would. This API
	// server has no node: the pods are the real-node suite's; here the objects are.
	cp := planes.Get(t, true)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := controlplane.WriteKubeconfig(kubeconfig, cp.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	install := exec.Command(filepath.Join(bin(t), "helm"), "install", "trustsync", "oci://"+host+"/trustsync/charts/trustsync", "--version", v,
		"--kubeconfig", kubeconfig, "-n", "trustsync-system", "--create-namespace",
		"--set", "image.repository="+host+"/trustsync/trustsync")
	install.Env = env
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("helm install oci://: %v\n%s", err, out)
	}
	client := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	deploys, err := client.AppsV1().Deployments("trustsync-system").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(deploys.Items) == 0 {
		t.Fatalf("no Deployments installed: %v", err)
	}
	for _, dep := range deploys.Items {
		if img := dep.Spec.Template.Spec.Containers[0].Image; img != host+"/trustsync/trustsync:v"+v {
			t.Errorf("%s runs %s, want the pushed %s/trustsync/trustsync:v%s", dep.Name, img, host, v)
		}
	}
}

func bin(t *testing.T) string {
	t.Helper()
	dir, err := controlplane.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// `make image`, as README teaches it, builds Linux binaries for GOARCH whatever the
// host, tags the tarball IMAGE, and stamps it with the architecture its binaries are
// built for: an arm64 image built here holds arm64 ELF binaries and says so. So does
// the PKCS#11 signer's image beside it.
func TestImage_MakeImageBuildsLinuxForGOARCHTaggedIMAGE(t *testing.T) {
	for _, arch := range []string{"arm64", "amd64"} {
		t.Run(arch, func(t *testing.T) {
			ref := "registry.example/team/trustsync:dev-" + arch
			cmd := exec.Command("make", "-s", "image", "GOARCH="+arch, "IMAGE="+ref)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("make image GOARCH=%s: %v\n%s", arch, err, out)
			}
			tag, err := name.NewTag(ref)
			if err != nil {
				t.Fatal(err)
			}
			img, err := tarball.ImageFromPath(filepath.Join(root, "_output", "trustsync-image.tar"), &tag)
			if err != nil {
				t.Fatalf("the tarball holds no %s: %v", ref, err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != "linux" || cf.Architecture != arch {
				t.Errorf("the image is stamped %s/%s, want linux/%s", cf.OS, cf.Architecture, arch)
			}
			checkBinaries(t, img, arch, releasedImage{})

			// Beside it, the PKCS#11 signer's, named after it.
			pkcs11Tag, err := name.NewTag("registry.example/team/trustsync-signer-pkcs11:dev-" + arch)
			if err != nil {
				t.Fatal(err)
			}
			pkcs11, err := tarball.ImageFromPath(filepath.Join(root, "_output", "trustsync-signer-pkcs11-image.tar"), &pkcs11Tag)
			if err != nil {
				t.Fatalf("the PKCS#11 signer's tarball holds no %s: %v", pkcs11Tag, err)
			}
			checkBinaries(t, pkcs11, arch, releasedImage{pkcs11: true})
		})
	}
}

// pluginPlatforms are the platforms a release's plugin is built for.
var pluginPlatforms = []string{"darwin/amd64", "darwin/arm64", "linux/amd64", "linux/arm64", "windows/amd64"}

func pluginArchive(version, platform string) string {
	goos, goarch, _ := strings.Cut(platform, "/")
	return "kubectl-trustsync_" + version + "_" + goos + "_" + goarch + ".tar.gz"
}

// untarPlugin unpacks a plugin archive into a new directory.
func untarPlugin(t *testing.T, archive string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xzf", archive, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("untar %s: %v %s", archive, err, out)
	}
	return dir
}

// Each plugin archive holds the binary for its platform and LICENSE, and nothing
// else; krew's manifest names every archive with its sha256 and the binary to run,
// and krew itself installs the plugin from it, after which `kubectl trustsync
// version` answers as a user's would.
func TestRelease_ThePluginArchivesAndKrewsManifestInstallWithKrew(t *testing.T) {
	d, v := dist(t), version(t)
	formats := map[string]func([]byte) bool{
		"linux":   func(b []byte) bool { return bytes.HasPrefix(b, []byte("\x7fELF")) },
		"darwin":  func(b []byte) bool { return bytes.HasPrefix(b, []byte{0xcf, 0xfa, 0xed, 0xfe}) },
		"windows": func(b []byte) bool { return bytes.HasPrefix(b, []byte("MZ")) },
	}
	manifest, err := os.ReadFile(filepath.Join(d, "krew-trustsync.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var plugin struct {
		Kind     string
		Metadata struct{ Name string }
		Spec     struct {
			Version   string
			Platforms []struct {
				Selector         struct{ MatchLabels map[string]string }
				URI, Sha256, Bin string
				Files            []struct{ From, To string }
			}
		}
	}
	if err := yaml.Unmarshal(manifest, &plugin); err != nil {
		t.Fatal(err)
	}
	if plugin.Kind != "Plugin" || plugin.Metadata.Name != "trustsync" || plugin.Spec.Version != "v"+v || len(plugin.Spec.Platforms) != len(pluginPlatforms) {
		t.Fatalf("krew-trustsync.yaml: kind %q, name %q, version %q, %d platforms", plugin.Kind, plugin.Metadata.Name, plugin.Spec.Version, len(plugin.Spec.Platforms))
	}
	for _, p := range plugin.Spec.Platforms {
		platform := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		archive := pluginArchive(v, platform)
		if !strings.HasSuffix(p.URI, "/"+archive) {
			t.Errorf("%s: the manifest points at %s, not at %s", platform, p.URI, archive)
		}
		data, err := os.ReadFile(filepath.Join(d, archive))
		if err != nil {
			t.Fatalf("%s: %v", platform, err)
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != p.Sha256 {
			t.Errorf("%s: the manifest says sha256 %s, the archive sums to %x", platform, p.Sha256, sum)
		}
		dir := untarPlugin(t, filepath.Join(d, archive))
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if want := []string{"LICENSE", p.Bin}; !slices.Equal(names, want) {
			t.Errorf("%s: the archive holds %v, want %v", platform, names, want)
		}
		exe, err := os.ReadFile(filepath.Join(dir, p.Bin))
		if err != nil || !formats[p.Selector.MatchLabels["os"]](exe) {
			t.Errorf("%s: %s is not a %s executable (%v)", platform, p.Bin, p.Selector.MatchLabels["os"], err)
		}
	}

	// krew, built pinned like the control plane, installs from the manifest and the
	// archive offline, as `kubectl krew install --manifest --archive` does.
	krewRoot := t.TempDir()
	install := exec.Command(filepath.Join(bin(t), "kubectl-krew"), "install", "--manifest", filepath.Join(d, "krew-trustsync.yaml"),
		"--archive", filepath.Join(d, pluginArchive(v, "linux/"+runtime.GOARCH)))
	install.Env = append(os.Environ(), "KREW_ROOT="+krewRoot, "KREW_NO_UPGRADE_CHECK=1")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("krew install: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(krewRoot, "bin", "kubectl-trustsync"), "version", "--client").Output()
	if err != nil || strings.TrimSpace(string(out)) != "kubectl-trustsync "+v {
		t.Errorf("the plugin krew installed says %q (%v), want kubectl-trustsync %s", out, err, v)
	}
}

// trustsync-crds.yaml holds every CRD of the chart and applies to a real API server
// as docs/upgrading.md applies it, each CRD then served.
func TestRelease_TheCRDsFileAppliesEveryCRD(t *testing.T) {
	d := dist(t)
	chartCRDs, err := filepath.Glob(filepath.Join(root, "charts", "trustsync", "files", "crds", "*.yaml"))
	if err != nil || len(chartCRDs) == 0 {
		t.Fatalf("no CRDs in the chart: %v", err)
	}
	cp := planes.Get(t, false)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := controlplane.WriteKubeconfig(kubeconfig, cp.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(bin(t), "kubectl"), "--kubeconfig", kubeconfig, "apply", "--server-side", "--force-conflicts",
		"-f", filepath.Join(d, "trustsync-crds.yaml")).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply -f trustsync-crds.yaml: %v\n%s", err, out)
	}
	for _, f := range chartCRDs {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if out, err := exec.Command(filepath.Join(bin(t), "kubectl"), "--kubeconfig", kubeconfig, "wait", "--for=condition=Established", "--timeout=30s", "crd/"+name).CombinedOutput(); err != nil {
			t.Errorf("CRD %s from trustsync-crds.yaml: %v\n%s", name, err, out)
		}
	}
}
