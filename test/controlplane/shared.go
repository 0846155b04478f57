package controlplane

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// Shared starts at most one control plane per mode for a whole test package, on first
// use: the machine may have 2 cores, and kube-apiserver takes seconds of both to start.
// Call StopAll from TestMain.
type Shared struct {
	mu     sync.Mutex
	planes map[bool]*ControlPlane
	errs   map[bool]error
	// Setup, when set, runs once on each new control plane (install CRDs, start a
	// webhook...). Its error fails every test that asks for that mode.
	Setup func(cp *ControlPlane, native bool) error
}

// Get returns the shared control plane serving the native bundle API (native) or not.
func (s *Shared) Get(t testing.TB, native bool) *ControlPlane {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.planes == nil {
		s.planes, s.errs = map[bool]*ControlPlane{}, map[bool]error{}
	}
	if _, tried := s.errs[native]; !tried {
		cp, err := Start(Options{NoNative: !native})
		if err == nil && s.Setup != nil {
			if err = s.Setup(cp, native); err != nil {
				cp.Stop()
				cp = nil
			}
		}
		s.planes[native], s.errs[native] = cp, err
	}
	if err := s.errs[native]; err != nil {
		t.Fatalf("control plane (native=%v): %v", native, err)
	}
	return s.planes[native]
}

// StopAll stops every control plane started, reporting start-up errors on stderr.
func (s *Shared) StopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for native, cp := range s.planes {
		if cp != nil {
			cp.Stop()
		} else if err := s.errs[native]; err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
}

// Main is TestMain for an e2e package: run the tests, stop the control planes, run
// each cleanup, exit.
func (s *Shared) Main(m *testing.M, cleanups ...func()) {
	code := m.Run()
	s.StopAll()
	for _, c := range cleanups {
		c()
	}
	os.Exit(code)
}
