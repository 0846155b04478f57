package write

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/trustsync/trustsync/delivery/render"
)

func readVisible(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAtomicWriter_WritesReadsAndRemoves(t *testing.T) {
	dir := t.TempDir()
	w := NewAtomicWriter(dir)

	changed, err := w.Write(map[string]render.File{"ca.pem": {Data: []byte("one"), Mode: 0o644}, "nested/dir/b.pem": {Data: []byte("two"), Mode: 0o644}})
	if err != nil || !changed {
		t.Fatalf("first write: changed=%v err=%v", changed, err)
	}
	if got := readVisible(t, dir, "ca.pem"); got != "one" {
		t.Errorf("ca.pem = %q", got)
	}
	if got := readVisible(t, dir, "nested/dir/b.pem"); got != "two" {
		t.Errorf("nested/dir/b.pem = %q", got)
	}
	if target, _ := os.Readlink(filepath.Join(dir, "ca.pem")); target != "..data/ca.pem" {
		t.Errorf("ca.pem links to %q, want ..data/ca.pem", target)
	}

	// The same payload again writes nothing: the version directory stays.
	before, _ := os.Readlink(filepath.Join(dir, "..data"))
	changed, err = w.Write(map[string]render.File{"ca.pem": {Data: []byte("one"), Mode: 0o644}, "nested/dir/b.pem": {Data: []byte("two"), Mode: 0o644}})
	after, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil || changed || before != after {
		t.Errorf("identical write: changed=%v err=%v version %s -> %s", changed, err, before, after)
	}

	// A smaller payload removes what it no longer holds; the replaced version is kept
	// for a moment (see TestAtomicWriter_RetainsReplacedVersionsBriefly).
	if _, err := w.Write(map[string]render.File{"ca.pem": {Data: []byte("three"), Mode: 0o600}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "nested")); !os.IsNotExist(err) {
		t.Errorf("nested link survives: %v", err)
	}
	if info, err := os.Stat(filepath.Join(dir, "ca.pem")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, %v; want 0600", info.Mode(), err)
	}
	if versions := countVersions(t, dir); versions != 2 {
		t.Errorf("%d version directories remain, want 2 (the current one and the one before)", versions)
	}

	got, err := w.Read()
	if err != nil || len(got) != 1 || string(got["ca.pem"].Data) != "three" {
		t.Errorf("Read() = %v, %v", got, err)
	}
}

func countVersions(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..20") {
			n++
		}
	}
	return n
}

func TestAtomicWriter_RetainsReplacedVersionsBriefly(t *testing.T) {
	tests := []struct {
		name         string
		writes       int
		gap          time.Duration // between writes
		leftover     bool          // a version directory from a previous run
		wantVersions int
	}{
		{name: "writes further apart than the retention keep the current and the previous version", writes: 5, gap: 3 * time.Second, wantVersions: 2},
		{name: "a burst keeps every version it replaced", writes: 5, gap: 10 * time.Millisecond, wantVersions: 5},
		{name: "a long burst keeps at most retainMax replaced versions", writes: 20, gap: time.Millisecond, wantVersions: 1 + retainMax},
		{name: "a version left by a previous run is removed at the first write", writes: 1, leftover: true, wantVersions: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.leftover {
				if err := os.Mkdir(filepath.Join(dir, "..2020_01_01_00_00_00.1"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			w := NewAtomicWriter(dir)
			w.now = func() time.Time { return now }
			for i := range tc.writes {
				if _, err := w.Write(map[string]render.File{"ca.pem": {Data: []byte{byte(i)}, Mode: 0o644}}); err != nil {
					t.Fatal(err)
				}
				now = now.Add(tc.gap)
			}
			if got := countVersions(t, dir); got != tc.wantVersions {
				t.Errorf("%d version directories remain, want %d", got, tc.wantVersions)
			}
			if got := readVisible(t, dir, "ca.pem"); got != string([]byte{byte(tc.writes - 1)}) {
				t.Errorf("ca.pem = %q, want the last write", got)
			}
		})
	}
}

func TestAtomicWriter_ReadOfAnEmptyDirectoryIsEmpty(t *testing.T) {
	got, err := NewAtomicWriter(t.TempDir()).Read()
	if err != nil || len(got) != 0 {
		t.Errorf("Read() = %v, %v", got, err)
	}
}

// A reader hammering the file while it is rewritten 1,000 times must only ever see a
// complete version: never a missing, empty, partial or mixed file.
func TestAtomicWriter_ConcurrentReaderNeverSeesAPartialFile(t *testing.T) {
	dir := t.TempDir()
	w := NewAtomicWriter(dir)
	version := func(i int) []byte {
		// Large enough that a torn write would show: 64 KiB of one repeated byte.
		return bytes.Repeat([]byte{byte('a' + i%26)}, 64<<10)
	}
	if _, err := w.Write(map[string]render.File{"ca.pem": {Data: version(0), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}

	var stop atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				data, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
				if err != nil {
					errs <- fmt.Errorf("read failed: %w", err)
					return
				}
				if len(data) != 64<<10 || bytes.Count(data, data[:1]) != len(data) {
					errs <- fmt.Errorf("read a partial or mixed file: %d bytes", len(data))
					return
				}
				reads.Add(1)
			}
		}()
	}
	for i := 1; i <= 1000; i++ {
		if _, err := w.Write(map[string]render.File{"ca.pem": {Data: version(i), Mode: 0o644}}); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if reads.Load() == 0 {
		t.Error("the readers never read")
	}
	t.Logf("%d reads during 1000 rewrites", reads.Load())
}

// A process that died between the ..data swap and its links left names missing or
// wrong; the next Write, though its content is unchanged, links every name again.
func TestAtomicWriter_UnchangedWriteRepairsTheVisibleLinks(t *testing.T) {
	payload := map[string]render.File{"ca.pem": {Data: []byte("one"), Mode: 0o644}, "nested/b.pem": {Data: []byte("two"), Mode: 0o644}}
	tests := []struct {
		name   string
		break_ func(dir string) error
	}{
		{"a link never made", func(dir string) error { return os.Remove(filepath.Join(dir, "ca.pem")) }},
		{"a nested file's directory link never made", func(dir string) error { return os.Remove(filepath.Join(dir, "nested")) }},
		{"a link pointing elsewhere", func(dir string) error {
			if err := os.Remove(filepath.Join(dir, "ca.pem")); err != nil {
				return err
			}
			return os.Symlink("..data/nested", filepath.Join(dir, "ca.pem"))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w := NewAtomicWriter(dir)
			if _, err := w.Write(payload); err != nil {
				t.Fatal(err)
			}
			if err := tc.break_(dir); err != nil {
				t.Fatal(err)
			}
			changed, err := NewAtomicWriter(dir).Write(payload)
			if err != nil || changed {
				t.Fatalf("Write of unchanged content = %v, %v; want no change and no error", changed, err)
			}
			if got := readVisible(t, dir, "ca.pem"); got != "one" {
				t.Errorf("ca.pem = %q, want %q", got, "one")
			}
			if got := readVisible(t, dir, "nested/b.pem"); got != "two" {
				t.Errorf("nested/b.pem = %q, want %q", got, "two")
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), newLinkPrefix) {
					t.Errorf("temporary link %s left behind", e.Name())
				}
			}
		})
	}
}

// The writer refuses what it cannot write instead of trusting its caller, and the
// files already there stay as they were.
func TestAtomicWriter_RefusesUnwritablePayloadsAndKeepsTheCurrentFiles(t *testing.T) {
	tests := []struct {
		name    string
		payload map[string]render.File
		wantErr string
	}{
		{"a file under another file", map[string]render.File{"a": {Data: []byte("x")}, "a/b": {Data: []byte("y")}}, `cannot write both "a" and "a/b"`},
		{"a NUL byte", map[string]render.File{"ca\x00.pem": {Data: []byte("x")}}, "must not contain a NUL byte"},
		{"an element over 255 bytes", map[string]render.File{strings.Repeat("n", 256): {Data: []byte("x")}}, "at most 255"},
		{"an escape from the directory", map[string]render.File{"../ca.pem": {Data: []byte("x")}}, "must not contain '..'"},
		{"the writer's own names", map[string]render.File{"..data": {Data: []byte("x")}}, "must not have an element starting with '..'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w := NewAtomicWriter(dir)
			if _, err := w.Write(map[string]render.File{"ca.pem": {Data: []byte("good"), Mode: 0o644}}); err != nil {
				t.Fatal(err)
			}
			changed, err := w.Write(tc.payload)
			if err == nil || changed || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Write() = %v, %v; want a refusal containing %q", changed, err, tc.wantErr)
			}
			if got := readVisible(t, dir, "ca.pem"); got != "good" {
				t.Errorf("ca.pem = %q after a refused write, want the good content", got)
			}
		})
	}
}

// smallTmpfs mounts a tmpfs of size bytes, as the injected memory-backed emptyDir is
// (the kubelet sizes it to the volume's sizeLimit), and unmounts it when the test ends.
func smallTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs of a given size needs root (make test runs as root)")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs: %v", size, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// A burst of changes fills the volume with versions kept for readers; the writer makes
// room (the kept versions go first) instead of failing every later write, and a new
// process finds room taken by an earlier one's leftovers too.
func TestAtomicWriter_AFullVolumeDoesNotStopUpdates(t *testing.T) {
	const fileSize = 60 << 10
	content := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, fileSize) }

	t.Run("a burst within the retention window", func(t *testing.T) {
		dir := smallTmpfs(t, 256<<10) // room for four versions of the file
		w := NewAtomicWriter(dir)
		fixed := time.Now()
		w.now = func() time.Time { return fixed } // nothing ages out: only space forces pruning
		for i := range 12 {
			if _, err := w.Write(map[string]render.File{"ca.pem": {Data: content(i), Mode: 0o644}}); err != nil {
				t.Fatalf("write %d of a burst on a full volume: %v", i+1, err)
			}
			if got := readVisible(t, dir, "ca.pem"); got != string(content(i)) {
				t.Fatalf("after write %d the file holds other content", i+1)
			}
		}
	})
	t.Run("leftovers of an earlier process", func(t *testing.T) {
		dir := smallTmpfs(t, 256<<10)
		if _, err := NewAtomicWriter(dir).Write(map[string]render.File{"ca.pem": {Data: content(0), Mode: 0o644}}); err != nil {
			t.Fatal(err)
		}
		// An earlier process's versions still on disk, filling the volume.
		for i := 0; ; i++ {
			v := filepath.Join(dir, fmt.Sprintf("..2020_01_01_00_00_00.%d", i))
			if err := os.Mkdir(v, 0o755); err != nil {
				break
			}
			if err := os.WriteFile(filepath.Join(v, "ca.pem"), content(i), 0o644); err != nil {
				break
			}
		}
		if _, err := NewAtomicWriter(dir).Write(map[string]render.File{"ca.pem": {Data: content(1), Mode: 0o644}}); err != nil {
			t.Fatalf("a new writer on a volume full of old versions: %v", err)
		}
		if got := readVisible(t, dir, "ca.pem"); got != string(content(1)) {
			t.Fatal("the file was not updated")
		}
	})
}

// The node agent writes as root for an app that runs as another uid: each file it
// writes belongs to the app, so a 0600 key is readable by the app alone.
func TestAtomicWriter_OwnerOwnsEveryFileWritten(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving files to another uid needs root (CI runs as root)")
	}
	dir := t.TempDir()
	w := NewAtomicWriter(dir)
	w.Owner = &Owner{UID: 1234, GID: 5678}
	if _, err := w.Write(map[string]render.File{"tls.key": {Data: []byte("key"), Mode: 0o600}, "nested/ca.pem": {Data: []byte("ca"), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tls.key", "nested/ca.pem"} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		st := info.Sys().(*syscall.Stat_t)
		if st.Uid != 1234 || st.Gid != 5678 {
			t.Errorf("%s is owned by %d:%d, want 1234:5678", name, st.Uid, st.Gid)
		}
	}
}
