package observe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/trustsync/trustsync/delivery/contract"
)

// signals maps the reload signals the contract allows to their numbers.
var signals = map[string]syscall.Signal{"SIGHUP": syscall.SIGHUP, "SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2}

// signalTarget sends a signal to the main process of one container of the pod, whose
// process namespace is shared (the injector sets shareProcessNamespace).
//
// Which processes are the container's: the injector mounts contract.ReloadMarkerPath
// into that container and no other, and a process's mount table
// (/proc/<pid>/mountinfo) is readable by every process of the pod, unlike its
// environment or root, which need ptrace rights. The container's main process is the
// oldest of those whose parent is not the container's: the process the runtime
// started the container with. Processes the runtime started in it later (a
// `kubectl exec` session) are not signalled: a HUP would end someone's shell. The
// main process's children are the app's to handle (a shell's `sleep` would die of a
// SIGHUP sent to it).
type signalTarget struct {
	container string
	signal    syscall.Signal
	name      string
	procfs    string
	kill      func(pid int, sig syscall.Signal) error
}

// NewSignalTarget sends the signal name to the main process of container.
func NewSignalTarget(name, container string) Target { return newSignalTarget(name, container) }

func newSignalTarget(name, container string) *signalTarget {
	return &signalTarget{container: container, signal: signals[name], name: name, procfs: "/proc", kill: syscall.Kill}
}

func (s *signalTarget) String() string { return s.name + " to container " + s.container }
func (s *signalTarget) kind() string   { return "signal" }

func (s *signalTarget) reload(context.Context) (string, error) {
	pids, err := s.mainProcesses()
	if err != nil {
		return "", err
	}
	var sent []string
	for _, pid := range pids {
		if err := s.kill(pid, s.signal); err != nil {
			if errors.Is(err, syscall.EPERM) {
				return "", fmt.Errorf("not permitted to signal pid %d: the container must run as the sidecar's user (uid %d), which the injector makes the app's when runAsUser is set", pid, os.Getuid())
			}
			if errors.Is(err, syscall.ESRCH) {
				continue // it exited meanwhile; its successor started after the change
			}
			return "", fmt.Errorf("signal pid %d: %w", pid, err)
		}
		sent = append(sent, strconv.Itoa(pid))
	}
	if len(sent) == 0 {
		return "", fmt.Errorf("the container's processes exited before they could be signalled")
	}
	return fmt.Sprintf("%s to container %s (pid %s)", s.name, s.container, strings.Join(sent, ", ")), nil
}

// mainProcesses finds the marked container's main process: of those whose parent is
// not the container's, the one started first.
func (s *signalTarget) mainProcesses() ([]int, error) {
	entries, err := os.ReadDir(s.procfs)
	if err != nil {
		return nil, fmt.Errorf("cannot list processes: %w", err)
	}
	marked := map[int]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		// A process that exits meanwhile is simply not found.
		if m, err := os.ReadFile(filepath.Join(s.procfs, e.Name(), "mountinfo")); err == nil && hasMountPoint(m, contract.ReloadMarkerPath) {
			marked[pid] = true
		}
	}
	if len(marked) == 0 {
		return nil, fmt.Errorf("no process of container %s is running, or the pod's process namespace is not shared (spec.shareProcessNamespace, which the injector sets)", s.container)
	}
	main, mainStart := 0, uint64(0)
	for pid := range marked {
		ppid, start, err := parentAndStart(filepath.Join(s.procfs, strconv.Itoa(pid), "stat"))
		if err != nil || marked[ppid] {
			continue
		}
		if main == 0 || start < mainStart || (start == mainStart && pid < main) {
			main, mainStart = pid, start
		}
	}
	if main == 0 {
		return nil, fmt.Errorf("the container's processes exited before they could be signalled")
	}
	return []int{main}, nil
}

// hasMountPoint reports whether a mountinfo table has a mount at path: the fifth
// field, with the kernel's octal escapes for space, tab, newline and backslash.
func hasMountPoint(mountinfo []byte, path string) bool {
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMountField(fields[4]) == path {
			return true
		}
	}
	return false
}

func unescapeMountField(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parentAndStart reads the parent pid and the start time (in clock ticks since boot)
// from a /proc/<pid>/stat line. The command name is in parentheses and may itself
// hold spaces and parentheses, so fields are counted from the last ')'.
func parentAndStart(statPath string) (ppid int, start uint64, err error) {
	b, err := os.ReadFile(statPath)
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("%s: no command name", statPath)
	}
	// After the name: state, ppid, ... starttime is the 20th (field 22 of the line).
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return 0, 0, fmt.Errorf("%s: too short", statPath)
	}
	if ppid, err = strconv.Atoi(fields[1]); err != nil {
		return 0, 0, err
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	return ppid, start, err
}
