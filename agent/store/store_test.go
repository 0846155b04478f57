package store

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// A restarted agent finds every volume it kept, with what it knew; a directory whose
// record is unreadable is named for clean-up, not silently kept.
func TestStore_KeepsListsAndRemovesVolumes(t *testing.T) {
	s := Store{Root: t.TempDir()}
	rec := Record{VolumeID: "csi-abc", TargetPath: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/trust/mount",
		Pod: Pod{Namespace: "apps", Name: "web", UID: "u", ServiceAccount: "web"}, Attributes: map[string]string{"sources": "[]"}, Owner: &Owner{UID: 1000, GID: 1000}}
	if err := s.Create(rec); err != nil {
		t.Fatal(err)
	}
	if err := s.SetToken(rec.VolumeID, "token-1"); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(s.TokenFile(rec.VolumeID)); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("token file: %v, %v; want mode 0600", info, err)
	}
	if info, err := os.Stat(s.Files(rec.VolumeID)); err != nil || info.Mode().Perm() != 0o755 {
		t.Errorf("files directory: %v, %v; want mode 0755, readable by the app", info, err)
	}
	broken := filepath.Join(s.Root, "leftover")
	if err := os.Mkdir(broken, 0o700); err != nil {
		t.Fatal(err)
	}
	records, brokenDirs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != 1 || !reflect.DeepEqual(records[0], rec) {
		t.Errorf("List() = %+v, want %+v", records, rec)
	}
	if !reflect.DeepEqual(brokenDirs, []string{broken}) {
		t.Errorf("broken = %v, want %v", brokenDirs, broken)
	}
	if err := s.Remove(rec.VolumeID); err != nil {
		t.Fatal(err)
	}
	if records, _, _ := s.List(); len(records) != 0 {
		t.Errorf("after Remove: %v", records)
	}
}

func TestStore_VolumeIDsOfAnyShapeAreSafeDirectoryNames(t *testing.T) {
	s := Store{Root: "/data"}
	for _, id := range []string{"../../etc", "a/b", "csi-" + string(make([]byte, 300))} {
		if dir := s.Dir(id); filepath.Dir(dir) != "/data" || len(filepath.Base(dir)) != 32 {
			t.Errorf("Dir(%q) = %q, want a 32-character name under /data", id, dir)
		}
	}
}
