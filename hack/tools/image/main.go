// Command image writes the container images trustsync's real-node tests and demo use,
// as tarballs that `ctr images import` takes, and a release's image and chart, without
// a container engine:
//
//	image trustsync --bin DIR --ref REF --out FILE   the five binaries, as the Dockerfile,
//	                                                 for the architecture they are built for
//	image signer-pkcs11 --bin DIR --base DIR --ref REF --out FILE
//	                                                 the signer built with cgo, for PKCS#11
//	                                                 (DIR/trustsync-signer-pkcs11), on the
//	                                                 glibc base hack/lib/pkcs11.sh unpacks
//	image shell --busybox FILE --ref REF --out FILE  a static busybox shell, any uid
//	image pause --pause FILE --ref REF --out FILE    the pod sandbox process
//	image layout --bin DIR --version V --revision R --ref REF --out FILE
//	                                                 a release's image: DIR/linux_<arch>/ for
//	                                                 each platform, one OCI index, tarred;
//	                                                 with --image signer-pkcs11 and --base
//	                                                 DIR (DIR/linux_<arch>/, a glibc base
//	                                                 each), the PKCS#11 signer's
//	image chart --chart DIR --out DIR                the chart as NAME-VERSION.tgz
//	image push --layout FILE --ref REF               a layout's index to a registry
//	image keygen --out DIR                           cosign.key and cosign.pub, cosign's format
//	image sign --key KEY --ref REPO@DIGEST           a signature in the registry, cosign's format
//	image sign-blob --key KEY FILE...                FILE.sig, as cosign sign-blob writes it
//
// Layers, layouts and chart packages carry fixed timestamps and owners, so the same
// inputs give the same digests.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The Dockerfile's final stage, stated once for the image built here; image_test.go
// checks that the Dockerfile still says the same.
const (
	NonRootUser = "65532:65532"
	Entrypoint  = "/trustsync-webhook"
)

// Binaries are the files the Dockerfile copies to the image's root: the five
// components, and the plugin, which the chart's helm test runs (kubectl trustsync check).
var Binaries = []string{"trustsync-webhook", "trustsync-sidecar", "trustsync-signer", "trustsync-controller", "trustsync-agent", "kubectl-trustsync"}

// epoch is every file's and the image's time, for reproducible digests.
var epoch = time.Unix(0, 0).UTC()

type entry struct {
	name string
	mode int64
	uid  int
	data []byte
	dir  bool
	link string
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: image trustsync|shell|pause [flags]; see the package comment")
		os.Exit(2)
	}
	kind := os.Args[1]
	switch kind {
	case "layout", "chart", "push", "keygen", "sign", "sign-blob":
		if err := release(kind, os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "image:", err)
			os.Exit(1)
		}
		return
	}
	fs := flag.NewFlagSet(kind, flag.ExitOnError)
	ref := fs.String("ref", "", "image reference to tag the tarball with (required)")
	out := fs.String("out", "", "tarball to write (required)")
	bin := fs.String("bin", "", "trustsync, signer-pkcs11: directory holding the binaries")
	base := fs.String("base", "", "signer-pkcs11: the glibc base (hack/lib/pkcs11.sh's glibc_base)")
	busybox := fs.String("busybox", "/bin/busybox", "shell: a static busybox binary")
	pause := fs.String("pause", "", "pause: the pause binary")
	_ = fs.Parse(os.Args[2:])
	if *ref == "" || *out == "" {
		fs.Usage()
		os.Exit(2)
	}

	var (
		files []entry
		cfg   v1.Config
		err   error
	)
	switch kind {
	case "trustsync":
		files, cfg, err = trustsyncImage(*bin)
	case "signer-pkcs11":
		files, cfg, err = signerPKCS11Image(*bin, *base)
	case "shell":
		files, cfg, err = shellImage(*busybox)
	case "pause":
		files, cfg, err = pauseImage(*pause)
	default:
		err = fmt.Errorf("unknown image kind %q: want trustsync, signer-pkcs11, shell or pause", kind)
	}
	var arch string
	if err == nil {
		arch, err = write(*ref, *out, files, cfg)
	}
	if err == nil {
		fmt.Fprintf(os.Stderr, "image: %s (linux/%s) in %s\n", *ref, arch, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// trustsyncImage matches the Dockerfile's final stage: distroless/static's nonroot
// user and layout, the four static binaries at the root, the webhook as entrypoint.
func trustsyncImage(bin string) ([]entry, v1.Config, error) {
	if bin == "" {
		return nil, v1.Config{}, fmt.Errorf("--bin is required")
	}
	files := baseFiles()
	for _, b := range Binaries {
		data, err := os.ReadFile(filepath.Join(bin, b))
		if err != nil {
			return nil, v1.Config{}, fmt.Errorf("read %s (run `make build` first): %w", b, err)
		}
		files = append(files, entry{name: b, mode: 0o755, data: data})
	}
	return files, v1.Config{
		User:       NonRootUser,
		Entrypoint: []string{Entrypoint},
		WorkingDir: "/home/nonroot",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}, nil
}

// baseFiles is the part of distroless/static a Go binary can notice: users, groups,
// a home and a writable /tmp.
func baseFiles() []entry {
	return []entry{
		{name: "etc", dir: true, mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
		{name: "home", dir: true, mode: 0o755},
		{name: "home/nonroot", dir: true, mode: 0o700, uid: 65532},
		{name: "tmp", dir: true, mode: 0o1777},
	}
}

// shellImage is busybox with a link per applet, readable and runnable by any uid.
func shellImage(busybox string) ([]entry, v1.Config, error) {
	data, err := os.ReadFile(busybox)
	if err != nil {
		return nil, v1.Config{}, fmt.Errorf("read busybox (install Debian's busybox-static): %w", err)
	}
	list, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, v1.Config{}, fmt.Errorf("%s --list: %w", busybox, err)
	}
	files := append(baseFiles(), entry{name: "bin", dir: true, mode: 0o755}, entry{name: "bin/busybox", mode: 0o755, data: data})
	for _, applet := range strings.Fields(string(list)) {
		if applet != "busybox" {
			files = append(files, entry{name: "bin/" + applet, link: "busybox"})
		}
	}
	return files, v1.Config{
		Cmd: []string{"/bin/sh"},
		Env: []string{"PATH=/bin"},
	}, nil
}

func pauseImage(pause string) ([]entry, v1.Config, error) {
	data, err := os.ReadFile(pause)
	if err != nil {
		return nil, v1.Config{}, fmt.Errorf("read pause binary: %w", err)
	}
	return []entry{{name: "pause", mode: 0o755, data: data}}, v1.Config{
		Entrypoint: []string{"/pause"},
		User:       "65535:65535",
	}, nil
}

// write tags the image with the architecture its executables are built for, which
// each of them must share: an image's platform is what a runtime picks it by, and a
// Mach-O or mixed set of binaries would start nowhere.
func write(ref, out string, files []entry, cfg v1.Config) (string, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	arch, err := linuxArch(files)
	if err != nil {
		return "", err
	}
	img, err := image(files, cfg, arch, false)
	if err != nil {
		return "", err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		return "", fmt.Errorf("write %s: %w", out, err)
	}
	return arch, os.Rename(tmp, out)
}

// elfArch maps an ELF machine to the architecture name OCI platforms use.
var elfArch = map[elf.Machine]string{
	elf.EM_X86_64:  "amd64",
	elf.EM_AARCH64: "arm64",
	elf.EM_ARM:     "arm",
	elf.EM_386:     "386",
	elf.EM_PPC64:   "ppc64le",
	elf.EM_S390:    "s390x",
	elf.EM_RISCV:   "riscv64",
}

// linuxArch is the one architecture every executable among files is built for.
func linuxArch(files []entry) (string, error) {
	arch, from := "", ""
	for _, f := range files {
		if f.dir || f.link != "" || f.mode&0o111 == 0 {
			continue
		}
		a, err := archOf(f.data)
		if err != nil {
			return "", fmt.Errorf("%s: %w", f.name, err)
		}
		if arch != "" && a != arch {
			return "", fmt.Errorf("%s is built for linux/%s and %s for linux/%s: build every binary with the same GOARCH", from, arch, f.name, a)
		}
		arch, from = a, f.name
	}
	if arch == "" {
		return "", errors.New("the image holds no executable to take its architecture from")
	}
	return arch, nil
}

func archOf(data []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("not a Linux (ELF) executable: build it with GOOS=linux (make image does): %w", err)
	}
	a, ok := elfArch[f.Machine]
	if !ok {
		return "", fmt.Errorf("built for %s, which this tool does not name", f.Machine)
	}
	if a == "ppc64le" && f.ByteOrder != binary.LittleEndian {
		a = "ppc64"
	}
	return a, nil
}

// image is files as a one-layer image for linux/arch; oci gives it OCI media types
// (for a release's index) rather than Docker's (which every containerd imports).
func image(files []entry, cfg v1.Config, arch string, oci bool) (v1.Image, error) {
	layerTar, err := tarOf(files)
	if err != nil {
		return nil, err
	}
	base, layerType := empty.Image, types.DockerLayer
	if oci {
		base = mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
		layerType = types.OCILayer
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(layerType))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config = cfg
	return mutate.ConfigFile(img, cf)
}

func tarOf(files []entry) ([]byte, error) {
	sort.SliceStable(files, func(i, j int) bool { return files[i].name < files[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case f.dir:
			h.Typeflag, h.Name = tar.TypeDir, f.name+"/"
		case f.link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
