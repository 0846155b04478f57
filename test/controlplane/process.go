package controlplane

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/trustsync/trustsync/test/cluster"
)

// Process is one child binary with its log file.
type Process struct {
	// LogPath is where the process's stdout and stderr go.
	LogPath string
	// Args are the arguments it was started with, to start it again alike;
	// HealthAddr is where a component serves /healthz, /readyz and /metrics.
	Args       []string
	HealthAddr string

	name   string
	binary string
	// env is added to the test's environment.
	env    []string
	starts int
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
}

// StartProcess starts binary with args, logging to logPath. The child gets SIGKILL if
// the test binary dies (a `go test -timeout` panic, say), so no server outlives its
// test on a 2-core machine.
func StartProcess(name, binary string, args []string, logPath string) (*Process, error) {
	return StartProcessEnv(name, binary, args, logPath, nil)
}

// StartProcessEnv is StartProcess with env added to the test's environment.
func StartProcessEnv(name, binary string, args []string, logPath string, env []string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
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
	p := &Process{LogPath: logPath, Args: args, name: name, binary: binary, env: env, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Restart stops the process (within grace) and starts it again alike, logging to a
// new file, so that what the new process logs is told apart from the old one's.
func (p *Process) Restart(grace time.Duration) (*Process, error) {
	p.Stop(grace)
	next, err := StartProcessEnv(p.name, p.binary, p.Args, fmt.Sprintf("%s.%d", p.LogPath, p.starts+1), p.env)
	if err != nil {
		return nil, err
	}
	next.starts, next.HealthAddr = p.starts+1, p.HealthAddr
	return next, nil
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM and, after grace, SIGKILL, then waits for the process to end.
func (p *Process) Stop(grace time.Duration) {
	if p == nil || p.Exited() {
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

// Kill ends the process at once, as a crash or an OOM kill would.
func (p *Process) Kill() {
	if p == nil || p.Exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Wait waits for the process to end and returns its exit error.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Metrics is what the process serves on /metrics now, at its HealthAddr.
func (p *Process) Metrics() (string, error) {
	resp, err := http.Get("http://" + p.HealthAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// Tail returns the end of the process's log, for error messages.
func (p *Process) Tail() string { return tail(p.LogPath, 4000) }

// tail returns the last n bytes of a log file, for error messages.
func tail(path string, n int64) string { return cluster.Tail(path, n) }

var errExited = errors.New("process exited")
