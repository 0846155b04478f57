// Package version is the release every trustsync binary reports: one source, the
// VERSION file at the repository's root, stamped into each binary at build time
// (make build, the image, the e2e harness: -ldflags -X ...version.Version=...).
package version

import (
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
