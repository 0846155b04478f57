// Package mounts makes the agent's two kinds of mount, a tmpfs for its data directory
// and a read-only bind mount of a volume's files at the kubelet's target, and takes
// them down. k8s.io/mount-utils runs mount(8) and umount(8) for these, which the
// agent's image (distroless, static) does not have; each is a system call or two.
package mounts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Mounter mounts and unmounts.
type Mounter interface {
	// BindReadOnly mounts source at target (an existing directory), read-only.
	BindReadOnly(source, target string) error
	// Tmpfs mounts a tmpfs of at most sizeBytes, mode 0700, at target.
	Tmpfs(target string, sizeBytes int64) error
	// IsMountPoint reports whether something is mounted at path.
	IsMountPoint(path string) (bool, error)
	// Unmount unmounts whatever is at target, if anything, and removes the
	// directory; a target that does not exist is already clean.
	Unmount(target string) error
}

// System mounts with the kernel's system calls; it needs CAP_SYS_ADMIN.
type System struct{}

// BindReadOnly implements Mounter. A bind mount takes the source's flags; read-only
// (and nosuid, nodev, noexec: these are data files) needs a remount.
func (System) BindReadOnly(source, target string) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s at %s: %w", source, target, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		_ = unix.Unmount(target, 0)
		return fmt.Errorf("make %s read-only: %w", target, err)
	}
	return nil
}

// Tmpfs implements Mounter.
func (System) Tmpfs(target string, sizeBytes int64) error {
	if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700,size="+strconv.FormatInt(sizeBytes, 10)); err != nil {
		return fmt.Errorf("mount a tmpfs at %s: %w", target, err)
	}
	return nil
}

// IsMountPoint implements Mounter.
func (System) IsMountPoint(path string) (bool, error) {
	mounted, err := mountinfo.Mounted(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return mounted, err
}

// Unmount implements Mounter.
func (s System) Unmount(target string) error {
	mounted, err := s.IsMountPoint(target)
	if err != nil {
		return err
	}
	if mounted {
		if err := unix.Unmount(target, 0); err != nil {
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
