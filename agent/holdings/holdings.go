// Package holdings observes what the pods on a node hold: the anchors in each trust
// file (PEM, or a PKCS#12 or JKS truststore), read from the node's side of the pods'
// volumes as the app reads them, whoever wrote them (trustsync's sidecar, its agent,
// or the kubelet projecting ClusterTrustBundles or the keys of the ConfigMaps and
// Secrets trustsync writes). It opens trust files alone, beneath their volume: never
// a certificate's key, never another key of a ConfigMap or Secret, never a path a
// pod's symlink points elsewhere.
package holdings

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/truststore"
	"github.com/trustsync/trustsync/trustfiles"
)

// What one pod may have the agent read is bounded, since any pod author writes the
// files (and, for a pod never sent to the webhook, says where they are): a file, or
// the pod's files together, beyond a bound are reported, not read. Memory then grows
// with the node's pods (the kubelet runs at most 110), never with what one pod
// writes. 150 public roots are about 200 KiB.
const (
	// MaxFileBytes bounds one trust file.
	MaxFileBytes = 4 << 20
	// MaxPodBytes bounds a pod's trust files together.
	MaxPodBytes = 4 << 20
	// MaxPodFiles bounds how many trust files of one pod are read.
	MaxPodFiles = 16
	// MaxNamedAnchors bounds the anchors the agent keeps a name and expiry of (for
	// expiry warnings); beyond it an anchor is known by its identity alone.
	MaxNamedAnchors = 10_000
	// maxNameLength cuts what is kept of an anchor's name.
	maxNameLength = 64
)

// File is what one pod holds in one trust file.
type File struct {
	trustfiles.TrustFile
	// Anchors are the SHA-256 of each anchor's DER, hex, sorted.
	Anchors []string
	// ChangedAt is when the file was last written (its modification time).
	ChangedAt time.Time
	// Err says why the file could not be read (missing, not a trust file in its
	// format, a truststore whose password the agent does not hold); Anchors are
	// then empty.
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
	// objects are the ConfigMaps and Secrets trustsync writes (SetObjects): the
	// keys of those a pod mounts are its trust files too.
	objects trustfiles.Objects
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
	files           []trustfiles.TrustFile
}

type seenFile struct {
	stamp   stamp
	anchors []string
	err     string
	// final: err is the content's at this stamp (not a trust file, a store out of
	// bounds), so the same file is not read again until it changes: a pod cannot
	// have the agent decode four mebibytes of junk at every scan.
	final bool
}

type stamp struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
}

// SetObjects says which ConfigMaps and Secrets trustsync writes now; the next Scan
// reads the keys of those the pods mount, and no other.
func (o *Scanner) SetObjects(objs trustfiles.Objects) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.objects, o.files = objs, nil
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
			pf = podFiles{resourceVersion: pod.ResourceVersion, files: trustfiles.Of(pod, o.objects)}
		}
		cached[pod.UID] = pf
		files := pf.files
		if len(files) == 0 || pod.UID == "" {
			continue
		}
		p := Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
		budget := MaxPodBytes
		for i, tf := range files {
			f := File{TrustFile: tf}
			if i == MaxPodFiles {
				f.Err = fmt.Sprintf("the pod has %d trust files, more than the %d read of one pod: not read", len(files), MaxPodFiles)
				p.Files = append(p.Files, f)
				continue
			}
			if i > MaxPodFiles {
				continue
			}
			loc, ok := locate(o.PodsDir, pod, tf)
			if !ok {
				continue
			}
			host := filepath.Join(loc.dir, loc.name)
			st := o.read(loc, tf, o.seen[host], &budget)
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

// location is where the agent reads a trust file on the node: name beneath dir.
// A subPath reader's file is the kubelet's bind mount of it for that container, a
// mount point itself (bind).
type location struct {
	dir, name string
	bind      bool
}

// locate is where tf of pod is on the node, as the container that reads it sees it:
// the volume's file, or a subPath reader's own bind of it (which the kubelet keeps at
// volume-subpaths/VOLUME/CONTAINER/INDEX, and never refreshes).
func locate(podsDir string, pod *corev1.Pod, tf trustfiles.TrustFile) (location, bool) {
	dir, ok := VolumeDir(podsDir, pod, tf.Volume)
	if !ok {
		return location{}, false
	}
	if tf.SubPath != nil {
		return location{dir: filepath.Join(podsDir, string(pod.UID), "volume-subpaths", tf.Volume, tf.SubPath.Container), name: strconv.Itoa(tf.SubPath.Index), bind: true}, true
	}
	return location{dir: dir, name: tf.File}, true
}

// read observes one file, reusing what prev found when the file is the same one;
// budget is what the pod may still have read, and is spent by the file's size.
func (o *Scanner) read(loc location, tf trustfiles.TrustFile, prev seenFile, budget *int) seenFile {
	if s := trustfiles.PasswordSecret(tf); s != nil {
		return seenFile{err: fmt.Sprintf("a %s truststore whose password is in Secret %s (key %s), which the agent does not read", tf.Format, s.Name, s.Key)}
	}
	f, err := openBeneath(loc.dir, loc.name, loc.bind)
	if err != nil {
		return seenFile{err: describe(err)}
	}
	defer f.Close()
	st, err := stampOf(f)
	if err != nil {
		return seenFile{err: err.Error()}
	}
	if st.size > MaxFileBytes {
		return seenFile{stamp: st, err: fmt.Sprintf("larger than %d bytes: not read", MaxFileBytes)}
	}
	if st.size > int64(*budget) {
		return seenFile{stamp: st, err: fmt.Sprintf("the pod's trust files hold more than %d bytes together: not read", MaxPodBytes)}
	}
	*budget -= int(st.size)
	if st == prev.stamp && (prev.err == "" || prev.final) {
		return prev
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return seenFile{stamp: st, err: err.Error()}
	}
	ders, err := decode(tf.Format, data)
	if err != nil {
		return seenFile{stamp: st, err: err.Error(), final: true}
	}
	anchors := make([]string, 0, len(ders))
	for _, der := range ders {
		id := bundle.AnchorID(der)
		if _, ok := o.anchors[id]; !ok && len(o.anchors) < MaxNamedAnchors {
			o.anchors[id] = namedAnchor(der)
		}
		anchors = append(anchors, id)
	}
	slices.Sort(anchors)
	return seenFile{stamp: st, anchors: slices.Compact(anchors)}
}

// namedAnchor keeps of der what expiry warnings need: its identity, validity and a
// name cut to maxNameLength, not the certificate (a node's pods may hold thousands).
func namedAnchor(der []byte) *bundle.Anchor {
	full := bundle.NewAnchor(der)
	a := &bundle.Anchor{Sum: full.Sum, NotBefore: full.NotBefore, NotAfter: full.NotAfter, Name: full.Name}
	if len(a.Name) > maxNameLength {
		a.Name = strings.ToValidUTF8(a.Name[:maxNameLength], "")
	}
	return a
}

// decode reads the certificates of a trust file in its format; a truststore is read
// with the password every store without a password Secret has.
func decode(format string, data []byte) ([][]byte, error) {
	var ders [][]byte
	var err error
	switch format {
	case v1alpha1.FormatPKCS12:
		ders, err = truststore.DecodePKCS12(data, v1alpha1.DefaultStorePassword)
	case v1alpha1.FormatJKS:
		ders, err = truststore.DecodeJKS(data, v1alpha1.DefaultStorePassword)
	default:
		ders, err = bundle.DecodeCertificates(data)
		format = "PEM"
	}
	if err != nil {
		return nil, fmt.Errorf("not a %s trust file: %w", format, err)
	}
	return ders, nil
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
		case v.ConfigMap != nil:
			return filepath.Join(base, "kubernetes.io~configmap", volume), true
		case v.Secret != nil:
			return filepath.Join(base, "kubernetes.io~secret", volume), true
		case v.CSI != nil:
			return filepath.Join(base, "kubernetes.io~csi", volume, "mount"), true
		}
	}
	return "", false
}
