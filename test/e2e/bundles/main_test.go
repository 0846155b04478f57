// Package bundles proves the test harness and bundle/'s API access against a real
// kube-apiserver, in both cluster modes.
package bundles

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/trustsync/trustsync/test/controlplane"
)

// One control plane per mode for the whole package, started on first use: the machine
// has 2 cores, and starting kube-apiserver costs seconds of both.
var (
	planes   = map[bool]*controlplane.ControlPlane{}
	planeErr = map[bool]error{}
	planesMu sync.Mutex
)

// cluster returns the shared control plane serving the native API (native) or not.
func cluster(t *testing.T, native bool) *controlplane.ControlPlane {
	t.Helper()
	planesMu.Lock()
	defer planesMu.Unlock()
	if _, started := planes[native]; !started && planeErr[native] == nil {
		planes[native], planeErr[native] = controlplane.Start(controlplane.Options{NoNative: !native})
	}
	if err := planeErr[native]; err != nil {
		t.Fatalf("control plane (native=%v): %v", native, err)
	}
	return planes[native]
}

func TestMain(m *testing.M) {
	code := m.Run()
	for native, cp := range planes {
		if cp != nil {
			cp.Stop()
		} else if err := planeErr[native]; err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	os.Exit(code)
}
