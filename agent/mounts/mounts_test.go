package mounts

import (
	"os"
	"path/filepath"
	"testing"
)

// What the agent does on a node: a tmpfs, a read-only bind of a directory in it, and
// both taken down again.
func TestSystem_TmpfsBindReadOnlyAndUnmount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root (CI runs as root)")
	}
	root := t.TempDir()
	data, target := filepath.Join(root, "data"), filepath.Join(root, "target")
	for _, d := range []string{data, target} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var m System
	if err := m.Tmpfs(data, 1<<20); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Unmount(data) }()
	if mounted, err := m.IsMountPoint(data); err != nil || !mounted {
		t.Fatalf("IsMountPoint(tmpfs) = %v, %v", mounted, err)
	}
	if err := os.WriteFile(filepath.Join(data, "ca.pem"), []byte("pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.BindReadOnly(data, target); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(target, "ca.pem")); err != nil || string(got) != "pem" {
		t.Errorf("through the bind mount: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(target, "x"), nil, 0o644); err == nil {
		t.Error("wrote through a read-only bind mount")
	}
	if err := m.Unmount(target); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("the target is still there: %v", err)
	}
	if err := m.Unmount(target); err != nil {
		t.Errorf("unmounting what is gone: %v, want nothing to do", err)
	}
	if mounted, err := m.IsMountPoint(filepath.Join(root, "missing")); err != nil || mounted {
		t.Errorf("IsMountPoint(missing) = %v, %v; want false", mounted, err)
	}
}
