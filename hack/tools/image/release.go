package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// release runs the release subcommands.
func release(kind string, args []string) error {
	fs := flag.NewFlagSet(kind, flag.ExitOnError)
	bin := fs.String("bin", "", "layout: directory with a linux_<arch>/ of the binaries per platform")
	imageKind := fs.String("image", "trustsync", "layout: which image, trustsync or signer-pkcs11")
	base := fs.String("base", "", "layout --image signer-pkcs11: directory with a linux_<arch>/ glibc base per platform")
	version := fs.String("version", "", "layout: the release's version")
	revision := fs.String("revision", "", "layout: the commit it is built from")
	ref := fs.String("ref", "", "layout: the reference to name the image by; push: where to push it")
	out := fs.String("out", "", "layout: the tarball to write; chart, keygen: the directory to write into")
	chart := fs.String("chart", "", "chart: the chart's directory")
	archive := fs.String("layout", "", "push: a tarball written by layout")
	key := fs.String("key", "", "sign, sign-blob: the private key (cosign's, password in $COSIGN_PASSWORD)")
	_ = fs.Parse(args)
	switch kind {
	case "keygen":
		if *out == "" {
			return fmt.Errorf("keygen needs --out DIR")
		}
		return keygen(*out)
	case "sign":
		if *key == "" || *ref == "" {
			return fmt.Errorf("sign needs --key and --ref REPO@DIGEST")
		}
		return signImage(*key, *ref)
	case "sign-blob":
		if *key == "" || fs.NArg() == 0 {
			return fmt.Errorf("sign-blob needs --key and the files to sign")
		}
		for _, f := range fs.Args() {
			if err := signBlob(*key, f); err != nil {
				return err
			}
		}
	case "layout":
		if *bin == "" || *version == "" || *ref == "" || *out == "" {
			return fmt.Errorf("layout needs --bin, --version, --ref and --out")
		}
		build := map[string]func() ([]entry, v1.Config, error){}
		for _, arch := range Platforms {
			bin, base := filepath.Join(*bin, "linux_"+arch), filepath.Join(*base, "linux_"+arch)
			switch *imageKind {
			case "trustsync":
				build[arch] = func() ([]entry, v1.Config, error) { return trustsyncImage(bin) }
			case "signer-pkcs11":
				build[arch] = func() ([]entry, v1.Config, error) { return signerPKCS11Image(bin, base) }
			default:
				return fmt.Errorf("layout --image %q: want trustsync or signer-pkcs11", *imageKind)
			}
		}
		title := "trustsync"
		if *imageKind != "trustsync" {
			title += "-" + *imageKind
		}
		idx, err := releaseIndex(build, title, *version, *revision)
		if err != nil {
			return err
		}
		if err := writeLayout(idx, *ref, *out); err != nil {
			return err
		}
		d, err := idx.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("%s %s\n", *out, d)
	case "chart":
		if *chart == "" || *out == "" {
			return fmt.Errorf("chart needs --chart and --out")
		}
		file, err := packageChart(*chart, *out)
		if err != nil {
			return err
		}
		fmt.Println(file)
	case "push":
		if *archive == "" || *ref == "" {
			return fmt.Errorf("push needs --layout and --ref")
		}
		d, err := pushLayout(*archive, *ref)
		if err != nil {
			return err
		}
		fmt.Printf("%s@%s\n", *ref, d)
	}
	return nil
}

// Platforms are the architectures a release's image holds, all linux.
var Platforms = []string{"amd64", "arm64"}

// releaseIndex is the multi-platform image of a release: one OCI image per platform
// (the files build[arch] gives), under one index annotated with the release.
func releaseIndex(build map[string]func() ([]entry, v1.Config, error), title, version, revision string) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range Platforms {
		files, cfg, err := build[arch]()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", arch, err)
		}
		if built, err := linuxArch(files); err != nil || built != arch {
			return nil, fmt.Errorf("linux/%s: the files are built for linux/%s (%v), not for the platform they are packed as", arch, built, err)
		}
		img, err := image(files, cfg, arch, true)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: arch},
		}})
	}
	return mutate.Annotations(idx, map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.source":   "https://github.com/trustsync/trustsync",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.title":    title,
	}).(v1.ImageIndex), nil
}

// writeLayout writes idx as an OCI image layout, tarred (what `ctr images import`,
// `kind load image-archive`, skopeo and crane take), tagged ref.
func writeLayout(idx v1.ImageIndex, ref, out string) error {
	dir, err := os.MkdirTemp("", "trustsync-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref,
		"io.containerd.image.name":          ref,
	})); err != nil {
		return err
	}
	return writeTar(dir, "", out, false)
}

// writeTar tars root's files under prefix into out, in name order, with fixed times
// and owners, so the same files give the same bytes; gzipped when zip.
func writeTar(root, prefix, out string, zip bool, leaveOut ...string) error {
	var names []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || slices.Contains(leaveOut, filepath.ToSlash(rel)) {
			return err
		}
		names = append(names, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	var buf bytes.Buffer
	var w io.Writer = &buf
	var gz *gzip.Writer
	if zip {
		gz, _ = gzip.NewWriterLevel(&buf, gzip.BestCompression)
		w = gz
	}
	tw := tar.NewWriter(w)
	for _, n := range names {
		info, err := os.Lstat(filepath.Join(root, n))
		if err != nil {
			return err
		}
		h := &tar.Header{Name: prefix + n, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case info.IsDir():
			h.Typeflag, h.Mode, h.Name = tar.TypeDir, 0o755, h.Name+"/"
		case info.Mode().IsRegular():
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, info.Size()
		default:
			return fmt.Errorf("%s: neither a file nor a directory", n)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			data, err := os.ReadFile(filepath.Join(root, n))
			if err != nil {
				return err
			}
			if _, err := tw.Write(data); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			return err
		}
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// packageChart writes the chart in dir as NAME-VERSION.tgz into outDir, as `helm
// package` lays it out (every file under NAME/), but with fixed times and owners:
// helm package stamps the time of packaging, so two packagings of one commit differ.
// Files listed in the chart's .helmignore are not supported: the chart has none, and
// one appearing is refused rather than ignored.
func packageChart(dir, outDir string) (string, error) {
	if _, err := os.Stat(filepath.Join(dir, ".helmignore")); err == nil {
		return "", fmt.Errorf("%s/.helmignore: not supported here; package with helm, or drop it", dir)
	}
	meta, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return "", err
	}
	field := func(key string) string {
		for _, line := range strings.Split(string(meta), "\n") {
			if v, ok := strings.CutPrefix(line, key+":"); ok {
				return strings.Trim(strings.TrimSpace(v), `"'`)
			}
		}
		return ""
	}
	chartName, version := field("name"), field("version")
	if chartName == "" || version == "" {
		return "", fmt.Errorf("%s/Chart.yaml names no name or version", dir)
	}
	out := filepath.Join(outDir, chartName+"-"+version+".tgz")
	return out, writeTar(dir, chartName+"/", out, true, BuildVersionFile)
}

// BuildVersionFile is where, in the chart in the tree, make build and make image write
// the build's version; a packaged chart runs its own appVersion, so it is left out.
const BuildVersionFile = "files/build-version"

// pushLayout pushes every image of the layout tarball's index to ref, as one index.
func pushLayout(archive, ref string) (string, error) {
	dir, err := os.MkdirTemp("", "trustsync-push-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := untar(archive, dir); err != nil {
		return "", err
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return "", err
	}
	outer, err := p.ImageIndex()
	if err != nil {
		return "", err
	}
	m, err := outer.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		return "", fmt.Errorf("%s: want one index in the layout, found %d (%v)", archive, len(m.Manifests), err)
	}
	idx, err := outer.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		return "", err
	}
	tag, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := remote.WriteIndex(tag, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := idx.Digest()
	return d.String(), err
}

func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, filepath.Clean(dir)+string(os.PathSeparator)) {
			return fmt.Errorf("%s: %q leaves the layout", archive, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				return err
			}
		}
	}
}
