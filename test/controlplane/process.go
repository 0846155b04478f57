package controlplane

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// process is one child binary with its log file.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startProcess starts binary with args, logging to logPath. The child gets SIGKILL if
// the test binary dies (a `go test -timeout` panic, say), so no server outlives its
// test on a 2-core machine.
func startProcess(name, binary string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}

	// Pdeathsig fires when the thread that forked the child exits, not the process.
	// A locked thread that is unlocked again stays alive, so the signal fires only
	// when the whole test binary goes.
	runtime.LockOSThread()
	err = cmd.Start()
	runtime.UnlockOSThread()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("failed to start %s (%s): %w", name, binary, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and, after grace, SIGKILL, then waits for the process to end.
func (p *process) stop(grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	// Kill the whole process group: nothing the server started may linger.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// tail returns the last n bytes of a log file, for error messages.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

var errExited = errors.New("process exited")
