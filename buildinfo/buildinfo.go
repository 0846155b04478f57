// Package buildinfo is what every trustsync binary reports of its own build: its
// release, one source, the VERSION file at the repository's root, stamped at build
// time (make build, the image, the e2e harness: -ldflags -X ...buildinfo.Version=...);
// and whether it runs in FIPS 140-3 mode, with which Go Cryptographic Module.
package buildinfo

import (
	"crypto/fips140"
	"fmt"
	"runtime/debug"
)

// Version is set at build time; "" in a binary built without the stamp (go run,
// go build by hand), which then reports what the Go toolchain recorded instead.
var Version string

// String is the version as the binaries print it: the release, or for an unstamped
// build "devel" and the commit the toolchain recorded (with "+dirty" for a working
// tree that had changes).
func String() string {
	if Version != "" {
		return Version
	}
	rev, dirty := "", false
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	switch {
	case rev == "":
		return "devel"
	case dirty:
		return fmt.Sprintf("devel+%.12s+dirty", rev)
	}
	return fmt.Sprintf("devel+%.12s", rev)
}

// FIPS says whether the binary runs in FIPS 140-3 mode (GODEBUG fips140=on or only,
// the default of a binary built with GOFIPS140) and the Go Cryptographic Module it
// was built with: its version (v1.0.0, the certified one), or "" for a build without
// GOFIPS140, which runs the module of its Go release.
func FIPS() (on bool, module string) {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "GOFIPS140" && s.Value != "off" {
				module = s.Value
			}
		}
	}
	return fips140.Enabled(), module
}

// FIPSLine is the line --version prints after the release.
func FIPSLine() string {
	on, module := FIPS()
	switch {
	case on && module != "":
		return "FIPS 140-3 mode: on (Go Cryptographic Module " + module + ")"
	case on:
		return "FIPS 140-3 mode: on (the module of this Go release, not a validated one: build with FIPS=1)"
	case module != "":
		return "FIPS 140-3 mode: off (built with Go Cryptographic Module " + module + "; GODEBUG=fips140=off?)"
	}
	return "FIPS 140-3 mode: off"
}
