package cluster

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWatchOpens_NamesTheProcessThatOpened(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("fanotify needs root")
	}
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	opens := WatchOpens(t, path)
	if got := opens(); len(got) != 0 {
		t.Fatalf("openers before any open: %v", got)
	}
	if _, err := os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	got := opens()
	if len(got) != 1 || got[0].PID != int32(os.Getpid()) {
		t.Fatalf("openers after this test read the file: %v, want this process (pid %d)", got, os.Getpid())
	}
}
