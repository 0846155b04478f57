package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/kubeapi/clientflags"
)

// Sidecar is a trustsync-sidecar run as a process for a pod, as the pod's
// ServiceAccount: what the kubelet would run, minus the container.
type Sidecar struct {
	// Dir is the trust volume; StateDir the sidecar-only one; Work holds the rest
	// (kubeconfig, termination log, log).
	Dir, StateDir, Work string
	Process             *Process
}

// StartSidecar runs `trustsync-sidecar <subcommand> <flags>` (args) for pod as ServiceAccount
// namespace/serviceAccount, with --dir, --state-dir, --kubeconfig, the pod's identity
// and --termination-log filled in. It is stopped when the test ends, and its log shown
// if the test failed.
func (cp *ControlPlane) StartSidecar(t testing.TB, namespace, serviceAccount string, pod *corev1.Pod, args ...string) *Sidecar {
	t.Helper()
	bin, err := BuildBinary("sidecar")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := cp.ServiceAccountConfig(context.Background(), namespace, serviceAccount)
	if err != nil {
		t.Fatal(err)
	}
	s := &Sidecar{Work: t.TempDir()}
	s.Dir, s.StateDir = filepath.Join(s.Work, "trust"), filepath.Join(s.Work, "state")
	for _, d := range []string{s.Dir, s.StateDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := filepath.Join(s.Work, "kubeconfig")
	if err := WriteKubeconfig(kubeconfig, cfg); err != nil {
		t.Fatal(err)
	}
	// The subcommand first, then these, then the caller's flags, which win over them
	// (a restart passing the previous --state-dir, say).
	all := append([]string{args[0], contract.Flag(contract.FlagDir, s.Dir), contract.Flag(contract.FlagStateDir, s.StateDir),
		contract.Flag(clientflags.FlagKubeconfig, kubeconfig), contract.Flag(contract.FlagPodName, pod.Name), contract.Flag(contract.FlagPodNamespace, namespace),
		contract.Flag(contract.FlagPodUID, string(pod.UID)), contract.Flag(contract.FlagServiceAccount, serviceAccount),
		contract.Flag(contract.FlagTerminationLog, s.TerminationLog()), "-v=2"}, args[1:]...)
	if s.Process, err = StartProcess("trustsync-sidecar", bin, all, filepath.Join(s.Work, "sidecar.log")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Process.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("sidecar log:\n%s", s.Process.Tail())
		}
	})
	return s
}

// TerminationLog is where init writes why it failed.
func (s *Sidecar) TerminationLog() string { return filepath.Join(s.Work, "termination-log") }

// Read reads a file of the trust volume.
func (s *Sidecar) Read(path string) ([]byte, error) {
	return os.ReadFile(filepath.Join(s.Dir, path))
}

// WaitFor waits until path holds exactly want, failing if the sidecar exits first.
func (s *Sidecar) WaitFor(t testing.TB, path string, want []byte) {
	t.Helper()
	s.waitUntil(t, path, func(got []byte) bool { return bytes.Equal(got, want) }, fmt.Sprintf("the expected %d bytes", len(want)))
}

// WaitForContent waits until path exists and is not empty, and returns it.
func (s *Sidecar) WaitForContent(t testing.TB, path string) []byte {
	t.Helper()
	return s.waitUntil(t, path, func(got []byte) bool { return len(got) > 0 }, "content")
}

// WaitUntil waits until path exists and ok says its content is what is wanted
// (described by what, for the failure message), and returns it.
func (s *Sidecar) WaitUntil(t testing.TB, path string, ok func([]byte) bool, what string) []byte {
	t.Helper()
	return s.waitUntil(t, path, ok, what)
}

func (s *Sidecar) waitUntil(t testing.TB, path string, ok func([]byte) bool, what string) []byte {
	t.Helper()
	var got []byte
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		if s.Process.Exited() {
			return false, fmt.Errorf("the sidecar exited: %v", s.Process.Wait())
		}
		var err error
		got, err = s.Read(path)
		return err == nil && ok(got), nil
	})
	if err != nil {
		t.Fatalf("%s never held %s (%v); it holds %d bytes", path, what, err, len(got))
	}
	return got
}
