// Package bundles proves the test harness and bundle/'s API access against a real
// kube-apiserver, in both cluster modes.
package bundles

import (
	"testing"

	"github.com/trustsync/trustsync/test/controlplane"
)

var planes controlplane.Shared

// cluster returns the shared control plane serving the native API (native) or not.
func cluster(t *testing.T, native bool) *controlplane.ControlPlane {
	return planes.Get(t, native)
}

func TestMain(m *testing.M) { planes.Main(m) }
