package sidecar

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
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

	changed, err := w.Write(map[string]File{"ca.pem": {Data: []byte("one"), Mode: 0o644}, "nested/dir/b.pem": {Data: []byte("two"), Mode: 0o644}})
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
	changed, err = w.Write(map[string]File{"ca.pem": {Data: []byte("one"), Mode: 0o644}, "nested/dir/b.pem": {Data: []byte("two"), Mode: 0o644}})
	after, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil || changed || before != after {
		t.Errorf("identical write: changed=%v err=%v version %s -> %s", changed, err, before, after)
	}

	// A smaller payload removes what it no longer holds, and versions older than the
	// previous one.
	if _, err := w.Write(map[string]File{"ca.pem": {Data: []byte("three"), Mode: 0o600}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "nested")); !os.IsNotExist(err) {
		t.Errorf("nested link survives: %v", err)
	}
	if info, err := os.Stat(filepath.Join(dir, "ca.pem")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, %v; want 0600", info.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	versions := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..20") {
			versions++
		}
	}
	if versions != 2 {
		t.Errorf("%d version directories remain, want 2 (the current one and the one before)", versions)
	}

	got, err := w.Read()
	if err != nil || len(got) != 1 || string(got["ca.pem"].Data) != "three" {
		t.Errorf("Read() = %v, %v", got, err)
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
	if _, err := w.Write(map[string]File{"ca.pem": {Data: version(0), Mode: 0o644}}); err != nil {
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
		if _, err := w.Write(map[string]File{"ca.pem": {Data: version(i), Mode: 0o644}}); err != nil {
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
