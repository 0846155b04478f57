package cluster

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Opener is a process that opened a watched file.
type Opener struct {
	PID int32
	// Command is the process's command line when it was seen ("" if it had exited).
	Command string
}

func (o Opener) String() string { return fmt.Sprintf("pid %d (%s)", o.PID, o.Command) }

// WatchOpens records which processes open path from now on, through fanotify, which
// names the opener (inotify would say only that someone did). The openers are read by
// calling the returned function; the watch ends with the test. Needs root.
func WatchOpens(t testing.TB, path string) func() []Opener {
	t.Helper()
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC)
	if err != nil {
		t.Fatalf("fanotify: %v", err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD, unix.FAN_OPEN, unix.AT_FDCWD, path); err != nil {
		t.Fatalf("fanotify mark %s: %v", path, err)
	}
	var openers []Opener
	return func() []Opener {
		buf := make([]byte, 64*1024)
		for {
			n, err := unix.Read(fd, buf)
			if n <= 0 || err != nil {
				return openers
			}
			for off := 0; off+int(unsafe.Sizeof(unix.FanotifyEventMetadata{})) <= n; {
				ev := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&buf[off]))
				if ev.Fd >= 0 {
					_ = unix.Close(int(ev.Fd))
				}
				cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", ev.Pid))
				openers = append(openers, Opener{PID: ev.Pid, Command: strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))})
				if ev.Event_len == 0 {
					break
				}
				off += int(ev.Event_len)
			}
		}
	}
}
