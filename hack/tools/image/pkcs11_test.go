package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The PKCS#11 signer's image holds the signer under the static signer's name, the
// loader and libraries of the unpacked packages with their copyrights, and names the
// packages' versions; what no signer or module uses is left out.
func TestSignerPKCS11Image_TheLibrariesTheirCopyrightsAndTheSignerNothingElse(t *testing.T) {
	exe := tinyBinary(t, "linux", "amd64")
	base := t.TempDir()
	for name, data := range map[string]string{
		"base/lib/x86_64-linux-gnu/libc.so.6":               string(exe),
		"base/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30": string(exe),
		"base/usr/lib/x86_64-linux-gnu/gconv/UTF-16.so":     string(exe),
		"base/usr/share/doc/libc6/copyright":                "GPL",
		"base/usr/share/doc/libc6/changelog.Debian.gz":      "x",
		"base/usr/share/doc/gcc-12-base/copyright":          "GPL with exception",
		"base/usr/share/lintian/overrides/libc6":            "x",
		"base/etc/ld.so.conf.d/x86_64-linux-gnu.conf":       "/usr/lib",
		"packages": "libc6=2.36-9+deb12u14\nlibstdc++6=12.2.0-14\n",
	} {
		writeFile(t, filepath.Join(base, name), data, 0o755)
	}
	for link, target := range map[string]string{
		"base/lib64/ld-linux-x86-64.so.2":              "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
		"base/usr/lib/x86_64-linux-gnu/libstdc++.so.6": "libstdc++.so.6.0.30",
		"base/usr/share/doc/libstdc++6":                "gcc-12-base",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(base, link)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(base, link)); err != nil {
			t.Fatal(err)
		}
	}
	bin := t.TempDir()
	writeFile(t, filepath.Join(bin, PKCS11Binary), string(exe), 0o755)

	files, cfg, err := signerPKCS11Image(bin, base)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		if !f.dir {
			names = append(names, f.name)
		}
	}
	slices.Sort(names)
	want := []string{"etc/group", "etc/passwd", "lib/x86_64-linux-gnu/libc.so.6", "lib64/ld-linux-x86-64.so.2", "trustsync-signer",
		"usr/lib/x86_64-linux-gnu/libstdc++.so.6", "usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30",
		"usr/share/doc/gcc-12-base/copyright", "usr/share/doc/libc6/copyright", "usr/share/doc/libstdc++6"}
	if !slices.Equal(names, want) {
		t.Errorf("the image holds\n%v\nwant\n%v", names, want)
	}
	if arch, err := linuxArch(files); err != nil || arch != "amd64" {
		t.Errorf("architecture %q (%v), want amd64", arch, err)
	}
	if got := cfg.Labels[BasePackagesLabel]; got != "libc6=2.36-9+deb12u14 libstdc++6=12.2.0-14" {
		t.Errorf("%s = %q", BasePackagesLabel, got)
	}
	if strings.Join(cfg.Entrypoint, " ") != "/trustsync-signer" || cfg.User != NonRootUser {
		t.Errorf("entrypoint %v as %q, want /trustsync-signer as %s", cfg.Entrypoint, cfg.User, NonRootUser)
	}
}

func TestSignerPKCS11Image_RefusesAMissingBaseOrBinaryByName(t *testing.T) {
	bin := t.TempDir()
	writeFile(t, filepath.Join(bin, PKCS11Binary), "x", 0o755)
	for _, tc := range []struct {
		name, bin, base, want string
	}{
		{"no signer built", t.TempDir(), t.TempDir(), "read trustsync-signer-pkcs11 (make build writes it; it needs cgo)"},
		{"not a base", bin, t.TempDir(), "is not a glibc base from hack/lib/pkcs11.sh"},
		{"no base given", bin, "", "--bin and --base are required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := signerPKCS11Image(tc.bin, tc.base); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func writeFile(t *testing.T, name, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}
