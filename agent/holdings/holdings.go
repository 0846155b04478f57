// Package holdings observes what the pods on a node hold: the anchors in each trust
// file, read from the node's side of the pods' volumes as the app reads them, whoever
// wrote them (trustsync's sidecar, its agent, or the kubelet projecting
// ClusterTrustBundles). It opens trust files alone, beneath their volume: never a
// certificate's key, never a path a pod's symlink points elsewhere.
package holdings

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/injector"
)

// MaxFileBytes bounds what is read of one trust file; a larger file is reported, not
// read. 150 public roots are about 200 KiB.
const MaxFileBytes = 4 << 20

// File is what one pod holds in one trust file.
type File struct {
	injector.TrustFile
	// Anchors are the SHA-256 of each anchor's DER, hex, sorted.
	Anchors []string
	// ChangedAt is when the file was last written (its modification time).
	ChangedAt time.Time
	// Err says why the file could not be read (missing, not a PEM trust file,
	// a truststore); Anchors are then empty.
	Err string
}

// Pod is what one pod holds.
type Pod struct {
	Namespace, Name string
	UID             types.UID
	Files           []File
}

// Scanner reads the trust files of the node's pods. Each Scan reads only the files
// whose identity (device, inode, size, modification time) changed since the last.
type Scanner struct {
	// PodsDir is the kubelet's pods directory as this process sees it.
	PodsDir string

	mu   sync.Mutex
	seen map[string]seenFile // by host path
	// files caches each pod's trust files by uid, for the resourceVersion they were
	// read from: reading them back parses the sidecar's arguments or the volume's
	// attributes, which change only with the pod.
	files map[types.UID]podFiles
	// anchors are the anchors the files held at the last scan, by identity: parsed
	// once however many files hold one, for what the identity alone does not say
	// (when it expires, what it is called).
	anchors map[string]*bundle.Anchor
}

type podFiles struct {
	resourceVersion string
	files           []injector.TrustFile
}

type seenFile struct {
	stamp   stamp
	anchors []string
	err     string
}

type stamp struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
}

// Scan observes every trust file of pods; it reports whether anything differs from
// the previous scan. Files of pods no longer given are forgotten.
func (o *Scanner) Scan(pods []*corev1.Pod) (held []Pod, changed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen == nil {
		o.seen = map[string]seenFile{}
		o.anchors = map[string]*bundle.Anchor{}
	}
	now := map[string]seenFile{}
	cached := map[types.UID]podFiles{}
	for _, pod := range pods {
		pf, ok := o.files[pod.UID]
		if !ok || pf.resourceVersion != pod.ResourceVersion {
			pf = podFiles{resourceVersion: pod.ResourceVersion, files: injector.TrustFiles(pod)}
		}
		cached[pod.UID] = pf
		files := pf.files
		if len(files) == 0 || pod.UID == "" {
			continue
		}
		p := Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
		for _, tf := range files {
			f := File{TrustFile: tf}
			dir, ok := VolumeDir(o.PodsDir, pod, tf.Volume)
			if !ok {
				continue
			}
			host := filepath.Join(dir, tf.File)
			st := o.read(dir, tf, o.seen[host])
			if prev, ok := o.seen[host]; !ok || prev.stamp != st.stamp || prev.err != st.err {
				changed = true
			}
			now[host] = st
			f.Anchors, f.Err, f.ChangedAt = st.anchors, st.err, st.stamp.mtime
			p.Files = append(p.Files, f)
		}
		held = append(held, p)
	}
	if len(now) != len(o.seen) {
		changed = true
	}
	o.seen, o.files = now, cached
	if changed {
		held := map[string]bool{}
		for _, f := range now {
			for _, id := range f.anchors {
				held[id] = true
			}
		}
		for id := range o.anchors {
			if !held[id] {
				delete(o.anchors, id)
			}
		}
	}
	return held, changed
}

// Anchor is the anchor of identity id that a file held at the last scan.
func (o *Scanner) Anchor(id string) (*bundle.Anchor, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	a, ok := o.anchors[id]
	return a, ok
}

// read observes one file, reusing prev's anchors when the file is the same one.
func (o *Scanner) read(dir string, tf injector.TrustFile, prev seenFile) seenFile {
	if tf.Format != contract.FormatPEM {
		return seenFile{err: "a " + tf.Format + " truststore: not read"}
	}
	f, err := openBeneath(dir, tf.File)
	if err != nil {
		return seenFile{err: describe(err)}
	}
	defer f.Close()
	st, err := stampOf(f)
	if err != nil {
		return seenFile{err: err.Error()}
	}
	if st == prev.stamp && prev.err == "" {
		return prev
	}
	if st.size > MaxFileBytes {
		return seenFile{stamp: st, err: fmt.Sprintf("larger than %d bytes: not read", MaxFileBytes)}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return seenFile{stamp: st, err: err.Error()}
	}
	ders, err := bundle.DecodeCertificates(data)
	if err != nil {
		return seenFile{stamp: st, err: "not a PEM trust file: " + err.Error()}
	}
	anchors := make([]string, 0, len(ders))
	for _, der := range ders {
		id := bundle.AnchorID(der)
		if _, ok := o.anchors[id]; !ok {
			o.anchors[id] = bundle.NewAnchor(der)
		}
		anchors = append(anchors, id)
	}
	slices.Sort(anchors)
	return seenFile{stamp: st, anchors: slices.Compact(anchors)}
}

func describe(err error) string {
	if errors.Is(err, os.ErrNotExist) {
		return "not written yet"
	}
	return err.Error()
}

// VolumeDir is where the kubelet keeps the pod's volume on the node, for the kinds of
// volume trust is delivered in; false for any other.
func VolumeDir(podsDir string, pod *corev1.Pod, volume string) (string, bool) {
	for _, v := range pod.Spec.Volumes {
		if v.Name != volume {
			continue
		}
		base := filepath.Join(podsDir, string(pod.UID), "volumes")
		switch {
		case v.EmptyDir != nil:
			return filepath.Join(base, "kubernetes.io~empty-dir", volume), true
		case v.Projected != nil:
			return filepath.Join(base, "kubernetes.io~projected", volume), true
		case v.CSI != nil:
			return filepath.Join(base, "kubernetes.io~csi", volume, "mount"), true
		}
	}
	return "", false
}
