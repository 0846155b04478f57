package main

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// PKCS11Binary is the signer built with cgo, which can load a PKCS#11 module; in its
// image it takes the static signer's name, so the chart runs either the same way.
const PKCS11Binary = "trustsync-signer-pkcs11"

// BasePackagesLabel names, in the image's configuration, the Debian packages its glibc
// base was unpacked from, each package=version: what a scanner or an auditor needs to
// know which security updates the image has.
const BasePackagesLabel = "io.trustsync.base.packages"

// signerPKCS11Image is the PKCS#11 signer on a minimal glibc base: Debian's libc6,
// libgcc-s1 and libstdc++6, as unpacked in base/base with base/packages naming their
// versions (hack/lib/pkcs11.sh). No PKCS#11 module is inside: the user mounts the
// vendor's, which needs the C library the static images lack.
func signerPKCS11Image(bin, base string) ([]entry, v1.Config, error) {
	if bin == "" || base == "" {
		return nil, v1.Config{}, fmt.Errorf("--bin and --base are required")
	}
	data, err := os.ReadFile(filepath.Join(bin, PKCS11Binary))
	if err != nil {
		return nil, v1.Config{}, fmt.Errorf("read %s (make build writes it; it needs cgo): %w", PKCS11Binary, err)
	}
	packages, err := os.ReadFile(filepath.Join(base, "packages"))
	if err != nil {
		return nil, v1.Config{}, fmt.Errorf("%s is not a glibc base from hack/lib/pkcs11.sh: %w", base, err)
	}
	libs, err := glibcBase(filepath.Join(base, "base"))
	if err != nil {
		return nil, v1.Config{}, err
	}
	files := append(baseFiles(), libs...)
	files = append(files, entry{name: "trustsync-signer", mode: 0o755, data: data})
	return files, v1.Config{
		User:       NonRootUser,
		Entrypoint: []string{"/trustsync-signer"},
		WorkingDir: "/home/nonroot",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Labels:     map[string]string{BasePackagesLabel: strings.Join(strings.Fields(string(packages)), " ")},
	}, nil
}

// inBase says which of the unpacked packages' files the image keeps: the libraries and
// the dynamic loader, and each package's copyright (their licences travel with them).
// Dropped: iconv's gconv modules (8 MB; neither Go nor a PKCS#11 module converts
// character sets), documentation, lintian and gdb files, ld.so.conf.d (with no
// ld.so.cache the loader searches its built-in multiarch directories).
func inBase(rel string) bool {
	switch {
	case strings.Contains(rel, "/gconv/") || strings.HasSuffix(rel, "/gconv"):
		return false
	case strings.HasPrefix(rel, "lib/"), strings.HasPrefix(rel, "lib64/"), strings.HasPrefix(rel, "usr/lib/"):
		return true
	case strings.HasPrefix(rel, "usr/share/doc/"):
		return path.Base(rel) == "copyright" || strings.Count(rel, "/") == 3
	}
	return false
}

// glibcBase is the files under dir that inBase keeps, with their directories, modes and
// symlinks as unpacked; times and owners are the image's fixed ones.
func glibcBase(dir string) ([]entry, error) {
	var files []entry
	dirs := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." || d.IsDir() {
			return err
		}
		rel = filepath.ToSlash(rel)
		if !inBase(rel) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		e := entry{name: rel, mode: int64(info.Mode().Perm())}
		if strings.HasPrefix(rel, "usr/share/doc/") {
			// Only executables may carry an executable bit: the image's
			// architecture is read from them.
			e.mode = 0o644
		}
		if d.Type()&fs.ModeSymlink != 0 {
			if e.link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if e.data, err = os.ReadFile(p); err != nil {
			return err
		}
		files = append(files, e)
		for parent := path.Dir(rel); parent != "."; parent = path.Dir(parent) {
			dirs[parent] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("the glibc base in %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("the glibc base in %s holds no library", dir)
	}
	for d := range dirs {
		files = append(files, entry{name: d, dir: true, mode: 0o755})
	}
	return files, nil
}
