package holdings

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// openBeneath opens file of the volume at dir for reading, resolving it beneath dir
// alone: the volume is the pod's to write, so a symlink in it may point anywhere (at
// another pod's key, at the node's secrets); such a path fails instead of being
// followed. FIFOs and devices do not block or open: only a regular file is read. No
// mount point is crossed, but for bind: file is then itself the kubelet's bind mount
// of a subPath (which the kubelet resolved safely when it made it), and is entered.
func openBeneath(dir, file string, bind bool) (*os.File, error) {
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	resolve := uint64(unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV)
	if bind {
		if strings.Contains(file, "/") {
			return nil, &os.PathError{Op: "open beneath " + dir, Path: file, Err: unix.EINVAL}
		}
		resolve &^= unix.RESOLVE_NO_XDEV
	}
	fd, err := unix.Openat2(dfd, file, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY,
		Resolve: resolve,
	})
	if err != nil {
		return nil, &os.PathError{Op: "open beneath " + dir, Path: file, Err: err}
	}
	return os.NewFile(uintptr(fd), file), nil
}

// stampOf identifies the open file's content: a rewrite (the atomic writers make a
// new file each time) changes it.
func stampOf(f *os.File) (stamp, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return stamp{}, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return stamp{}, fmt.Errorf("%s is not a regular file: not read", f.Name())
	}
	return stamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec)}, nil
}
