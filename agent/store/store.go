// Package store keeps what the node agent knows of each volume it published, on the
// agent's own memory-backed directory, so that an agent restarted (killed, or rolled
// by its DaemonSet) finds every live volume again and keeps it current, and one
// returning after a pod was deleted can clean up after it.
//
// Each volume has a directory named after a hash of its volume ID:
//
//	volume.json  the Record
//	token        the pod's ServiceAccount token (0600), refreshed on each republish
//	state/       the certificate's pending key
//	files/       the pod's files (the atomic writer's directory), bind-mounted into the pod
package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Record is what the agent keeps of one published volume.
type Record struct {
	VolumeID   string `json:"volumeID"`
	TargetPath string `json:"targetPath"`
	Pod        Pod    `json:"pod"`
	// Attributes are the volume's attributes as published, without the kubelet's
	// tokens: the Spec, and the pod's identity.
	Attributes map[string]string `json:"attributes"`
	// Owner owns the files written, the uid and gid the app runs as; nil: the agent's.
	Owner *Owner `json:"owner,omitempty"`
}

// Pod names the pod a volume belongs to.
type Pod struct {
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	UID            string `json:"uid"`
	ServiceAccount string `json:"serviceAccount"`
}

func (p Pod) String() string { return p.Namespace + "/" + p.Name }

// Owner is a uid and gid.
type Owner struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// Store is the agent's directory of volumes.
type Store struct {
	Root string
}

const (
	recordFile = "volume.json"
	tokenFile  = "token"
)

// Dir is the directory of the volume with volumeID. Volume IDs are the kubelet's
// choice; hashing them makes any ID a safe, fixed-length name.
func (s Store) Dir(volumeID string) string {
	sum := sha256.Sum256([]byte(volumeID))
	return filepath.Join(s.Root, hex.EncodeToString(sum[:16]))
}

// Files is where the volume's files are written, and what the pod mounts.
func (s Store) Files(volumeID string) string { return filepath.Join(s.Dir(volumeID), "files") }

// State keeps the volume's pending certificate key.
func (s Store) State(volumeID string) string { return filepath.Join(s.Dir(volumeID), "state") }

// TokenFile holds the pod's token, which a client reads anew as it changes.
func (s Store) TokenFile(volumeID string) string { return filepath.Join(s.Dir(volumeID), tokenFile) }

// Create makes the volume's directories and keeps r. The files directory is readable
// by the pod's uid; the rest is the agent's alone.
func (s Store) Create(r Record) error {
	dir := s.Dir(r.VolumeID)
	for _, d := range []struct {
		path string
		mode fs.FileMode
	}{{dir, 0o700}, {s.State(r.VolumeID), 0o700}, {s.Files(r.VolumeID), 0o755}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return fmt.Errorf("cannot make the volume's directory: %w", err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, recordFile), data)
}

// SetToken keeps the pod's current token for the volume.
func (s Store) SetToken(volumeID, token string) error {
	return writeFileAtomic(s.TokenFile(volumeID), []byte(token))
}

// Get reads the record of volumeID.
func (s Store) Get(volumeID string) (Record, error) {
	return s.read(s.Dir(volumeID))
}

// List reads every record; a directory whose record cannot be read is returned by
// path in broken, for the caller to clean up.
func (s Store) List() (records []Record, broken []string, err error) {
	entries, err := os.ReadDir(s.Root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(s.Root, e.Name())
		r, err := s.read(dir)
		if err != nil || s.Dir(r.VolumeID) != dir {
			broken = append(broken, dir)
			continue
		}
		records = append(records, r)
	}
	return records, broken, nil
}

func (s Store) read(dir string) (Record, error) {
	var r Record
	data, err := os.ReadFile(filepath.Join(dir, recordFile))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w", filepath.Join(dir, recordFile), err)
	}
	return r, nil
}

// Remove deletes everything kept for volumeID.
func (s Store) Remove(volumeID string) error { return os.RemoveAll(s.Dir(volumeID)) }

// writeFileAtomic replaces path with data (0600): a crash leaves the old or the new.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
