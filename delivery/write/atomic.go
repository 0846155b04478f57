// Package write is the stage that writes: it puts a volume's files into its directory in
// one atomic step, as the kubelet's atomic writer does, so the app never reads a partial
// update.
package write

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/render"
)

// Writer puts a set of files into a directory so that readers never see a partial
// update. The sidecar writes through it; tests may substitute another.
type Writer interface {
	// Write makes the directory hold exactly payload (path -> content), in one step.
	// It reports whether anything changed: identical content is not rewritten.
	Write(payload map[string]render.File) (changed bool, err error)
	// Read returns what the directory holds now, for keeping the last good content
	// across sidecar restarts.
	Read() (map[string]render.File, error)
}

const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
	// newLinkPrefix names a visible link while it is made; hidden like the versions.
	newLinkPrefix = "..link_tmp."

	// A replaced version stays on disk this long, and at most this many of them, so a
	// reader whose open() resolved "..data" just before a swap still finds its file.
	// The kubelet removes the previous version at once, which leaves that window open:
	// a reader paused between resolving "..data" and the file in it fails with ENOENT.
	// The cost is up to retainMax extra copies of the files during a burst of writes.
	retainFor = 2 * time.Second
	retainMax = 8
)

// AtomicWriter is the kubelet's atomic writer layout, written again here because the
// kubelet's lives in k8s.io/kubernetes, which is not meant to be imported: every
// version of the content is a hidden timestamped directory; "..data" is a symlink to
// the current one, replaced by rename (atomic on POSIX); each visible name is a symlink
// "name -> ..data/name". A reader opening a visible name therefore resolves to one
// complete version or the next, never a mix, and never a truncated file.
type AtomicWriter struct {
	Dir string
	// Owner, when set, owns every file written: the app's uid and gid, where the
	// writer (the node agent, as root) is not the app. The sidecar runs as the app.
	Owner *Owner
	// now names version directories and times their retirement; tests may fix it.
	now func() time.Time
	// retired lists replaced versions still on disk, oldest first.
	retired []retiredVersion
	// scanned says that the directory was cleared once of versions this writer does
	// not know (an earlier process's): from then on it removes only its own, by
	// name, without listing the directory at every write.
	scanned bool
}

// Owner is a uid and gid.
type Owner struct{ UID, GID int }

type retiredVersion struct {
	name string
	at   time.Time
}

// NewAtomicWriter returns a writer for dir, which must exist.
func NewAtomicWriter(dir string) *AtomicWriter {
	return &AtomicWriter{Dir: dir, now: time.Now}
}

// Write implements Writer. A payload it cannot write (a path the kubelet's writer
// would refuse, or one file under another) is refused whole before anything on disk
// changes. Whatever a previous process left half done, a Write leaves every visible
// name linked, even when the content is unchanged.
func (w *AtomicWriter) Write(payload map[string]render.File) (bool, error) {
	if err := validatePayload(payload); err != nil {
		return false, err
	}
	oldVersion, err := os.Readlink(filepath.Join(w.Dir, dataDirName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("cannot read %s: %w", dataDirName, err)
	}
	current, err := w.Read()
	if err != nil {
		return false, err
	}
	if samePayload(current, payload) {
		// A crash between the ..data swap and the links leaves names unlinked that
		// no later content change may come to repair.
		return false, w.linkVisibleNames(payload, current)
	}
	// An earlier process's versions go before this writer's first write, so that
	// they cannot keep it from fitting. This writer's own replaced versions go after
	// each swap, so that removing them does not delay the new content (the node
	// agent swaps a thousand volumes at once); a full volume has them go first, below.
	if !w.scanned {
		if err := w.prune(oldVersion, w.now()); err != nil {
			return false, err
		}
	}
	version, err := w.writeNewVersion(payload)
	if errors.Is(err, syscall.ENOSPC) && len(w.retired) > 0 {
		// Still no room: readers of replaced versions lose their grace period rather
		// than the current content its update.
		for i := range w.retired {
			w.retired[i].at = time.Time{}
		}
		if perr := w.prune(oldVersion, w.now()); perr != nil {
			return false, perr
		}
		version, err = w.writeNewVersion(payload)
	}
	if err != nil {
		return false, err
	}

	// Point ..data at the new version in one rename.
	tmpLink := filepath.Join(w.Dir, newDataDirName)
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(version), tmpLink); err != nil {
		_ = os.RemoveAll(version)
		return false, fmt.Errorf("cannot link the new version: %w", err)
	}
	if err := os.Rename(tmpLink, filepath.Join(w.Dir, dataDirName)); err != nil {
		_ = os.Remove(tmpLink)
		_ = os.RemoveAll(version)
		return false, fmt.Errorf("cannot switch to the new version: %w", err)
	}

	if err := w.linkVisibleNames(payload, current); err != nil {
		return true, err
	}
	if oldVersion != "" {
		w.retired = append(w.retired, retiredVersion{name: oldVersion, at: w.now()})
	}
	return true, w.prune(filepath.Base(version), w.now())
}

// writeNewVersion writes payload into a new hidden version directory.
func (w *AtomicWriter) writeNewVersion(payload map[string]render.File) (string, error) {
	version, err := os.MkdirTemp(w.Dir, w.now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return "", fmt.Errorf("cannot create a version directory in %s: %w", w.Dir, err)
	}
	if err := os.Chmod(version, 0o755); err != nil {
		_ = os.RemoveAll(version)
		return "", err
	}
	if err := writeVersion(version, payload, w.Owner); err != nil {
		_ = os.RemoveAll(version)
		return "", err
	}
	return version, nil
}

// prune forgets replaced versions older than retainFor, or beyond the newest
// retainMax, and removes them from disk; the first time, it removes every version but
// current and those kept, an earlier process's included.
func (w *AtomicWriter) prune(current string, now time.Time) error {
	var gone []string
	w.retired = slices.DeleteFunc(w.retired, func(r retiredVersion) bool {
		if now.Sub(r.at) > retainFor {
			gone = append(gone, r.name)
			return true
		}
		return false
	})
	if n := len(w.retired) - retainMax; n > 0 {
		for _, r := range w.retired[:n] {
			gone = append(gone, r.name)
		}
		w.retired = slices.Delete(w.retired, 0, n)
	}
	if !w.scanned {
		keep := []string{}
		if current != "" {
			keep = append(keep, current)
		}
		for _, r := range w.retired {
			keep = append(keep, r.name)
		}
		if err := w.removeVersionsExcept(keep); err != nil {
			return err
		}
		w.scanned = true
		return nil
	}
	for _, name := range gone {
		if err := os.RemoveAll(filepath.Join(w.Dir, name)); err != nil {
			w.scanned = false // what is left is found by the next listing
			return fmt.Errorf("cannot remove the old version %s: %w", name, err)
		}
	}
	return nil
}

// removeVersionsExcept removes every version directory not in keep, including those a
// previous run left behind.
func (w *AtomicWriter) removeVersionsExcept(keep []string) error {
	entries, err := os.ReadDir(w.Dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "..") || name == dataDirName || name == newDataDirName || slices.Contains(keep, name) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(w.Dir, name)); err != nil {
			return fmt.Errorf("cannot remove the old version %s: %w", name, err)
		}
	}
	return nil
}

func validatePayload(payload map[string]render.File) error {
	var errs []error
	paths := make([]string, 0, len(payload))
	for p := range payload {
		if fieldErrs := v1alpha1.ValidateFilePath(field.NewPath("file"), p); len(fieldErrs) > 0 {
			errs = append(errs, fmt.Errorf("cannot write %q: %w", p, fieldErrs.ToAggregate()))
			continue
		}
		paths = append(paths, p)
	}
	if file, under, ok := v1alpha1.FileDirectoryConflict(paths); ok {
		errs = append(errs, fmt.Errorf("cannot write both %q and %q: the first would have to be a file and a directory", file, under))
	}
	return errors.Join(errs...)
}

func writeVersion(dir string, payload map[string]render.File, owner *Owner) error {
	for name, f := range payload {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Data, f.Mode); err != nil {
			return fmt.Errorf("cannot write %s: %w", name, err)
		}
		// WriteFile's mode is filtered by the umask; the mode asked for is the mode meant.
		if err := os.Chmod(p, f.Mode); err != nil {
			return err
		}
		if owner != nil {
			if err := os.Chown(p, owner.UID, owner.GID); err != nil {
				return fmt.Errorf("cannot give %s to uid %d, gid %d: %w", name, owner.UID, owner.GID, err)
			}
		}
	}
	return nil
}

// linkVisibleNames makes a "name -> ..data/name" symlink for each top-level name of the
// payload and removes those of names no longer in it. Nested paths ("a/b.pem") are
// reached through their top-level directory's link.
func (w *AtomicWriter) linkVisibleNames(payload, previous map[string]render.File) error {
	want := topLevelNames(payload)
	for name := range want {
		link := filepath.Join(w.Dir, name)
		target := filepath.Join(dataDirName, name)
		if got, err := os.Readlink(link); err == nil && got == target {
			continue
		}
		// Through a temporary link and a rename, so a wrong entry left by an earlier
		// process is replaced in one step.
		tmp := filepath.Join(w.Dir, newLinkPrefix+name)
		_ = os.Remove(tmp)
		if err := os.Symlink(target, tmp); err != nil {
			return fmt.Errorf("cannot link %s: %w", name, err)
		}
		if err := os.Rename(tmp, link); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("cannot link %s: %w", name, err)
		}
	}
	for name := range topLevelNames(previous) {
		if !want[name] {
			if err := os.Remove(filepath.Join(w.Dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("cannot remove %s: %w", name, err)
			}
		}
	}
	return nil
}

func topLevelNames(payload map[string]render.File) map[string]bool {
	out := map[string]bool{}
	for p := range payload {
		out[strings.SplitN(p, "/", 2)[0]] = true
	}
	return out
}

// Read implements Writer: the files of the current version.
func (w *AtomicWriter) Read() (map[string]render.File, error) {
	out := map[string]render.File{}
	target, err := os.Readlink(filepath.Join(w.Dir, dataDirName))
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read %s in %s: %w", dataDirName, w.Dir, err)
	}
	version := filepath.Join(w.Dir, target)
	err = filepath.WalkDir(version, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(version, p)
		out[filepath.ToSlash(rel)] = render.File{Data: data, Mode: info.Mode().Perm()}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read the current files in %s: %w", w.Dir, err)
	}
	return out, nil
}

func samePayload(a, b map[string]render.File) bool {
	if len(a) != len(b) {
		return false
	}
	for name, fa := range a {
		fb, ok := b[name]
		if !ok || fa.Mode != fb.Mode || !bytes.Equal(fa.Data, fb.Data) {
			return false
		}
	}
	return true
}
