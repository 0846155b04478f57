package render

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	tsbundle "github.com/trustsync/trustsync/bundle"
)

// TrustFileMode: trust anchors are public; any process of the pod may read them.
const TrustFileMode = 0o644

// File is one rendered file, as the writer puts it on disk. It is the pure stage's
// (not the writer's) so that rendering links nothing that touches a disk.
type File struct {
	Data []byte
	Mode fs.FileMode
}

// Snapshot is what a pod's sources hold at one moment. Its objects are shared with the
// watches and never modified.
type Snapshot struct {
	// Bundles holds, per BundleSelector.Key, what that selection's watches hold now in
	// every served API (the union of native and mirror bundles). Render matches them
	// again, so a watch may hold more than its selection.
	Bundles map[string][]*certificatesv1.ClusterTrustBundle
	// ConfigMaps and Secrets hold the plan's objects of the pod's namespace by name;
	// one absent does not exist.
	ConfigMaps map[string]*corev1.ConfigMap
	Secrets    map[string]*corev1.Secret
	// Certificate is the workload certificate's files (contract.File*), nil before
	// the first issuance; they are written in the same swap as the trust files, so
	// the certificate and its key never mismatch.
	Certificate map[string]File
	// Refused and Undecided hold, per BundleSelector.Key, the bundles the watches hold
	// that the pod may not trust (its namespace is not granted them), or of which that
	// cannot be told yet. A selection whose matches are all refused renders as empty
	// (a grant withdrawn takes its anchors out); one that matches an undecided bundle
	// fails its path, which keeps its last good content.
	Refused, Undecided map[string][]*certificatesv1.ClusterTrustBundle
}

// Withhold holds b, of selection key, apart from what is rendered: as refused, or as
// undecided.
func (s *Snapshot) Withhold(key string, b *certificatesv1.ClusterTrustBundle, undecided bool) {
	m := &s.Refused
	if undecided {
		m = &s.Undecided
	}
	if *m == nil {
		*m = map[string][]*certificatesv1.ClusterTrustBundle{}
	}
	(*m)[key] = append((*m)[key], b)
}

// Rendering is what one render made: the files to write and what they hold. Until
// written it is a proposal; once written it is the app's state and the next render's
// "last".
type Rendering struct {
	plan *Plan
	// Files is the payload: every trust path (a held-back one at its last good
	// content) and the certificate files.
	Files map[string]File
	// Paths describes every trust path that has content, rendered now or held.
	Paths map[string]Path
	// Failed maps each held-back path to why; a path failed and without last good
	// content is in Failed and not in Paths (nothing is written for it).
	Failed map[string]error
	// decodings is each source's decoding, the base for decoding its next edit.
	decodings map[string]*tsbundle.Decoding
}

// Path is what one trust file holds.
type Path struct {
	Content []byte
	// Anchors are the file's anchors, deduplicated, and FirstExpiry when the first
	// of them expires (zero without any); neither is known for a file found on disk.
	Anchors     []*tsbundle.Anchor
	FirstExpiry time.Time
	// Set identifies the set of anchors (tsbundle.Pool.SetSum), Password a truststore's
	// password. Known is false for a file found on disk that could not be read back:
	// it is kept as last good content, but its set is not known.
	Set      [sha256.Size]byte
	Password string
	Known    bool
	// shared holds Content when it is a PEM encoding shared with every other path
	// holding the same set (see sharedPEMOf); it keeps that encoding alive.
	shared *sharedPEM
}

// Fresh is every path rendered now (not held back).
func (r *Rendering) Fresh() map[string]Path {
	out := map[string]Path{}
	for p, path := range r.Paths {
		if _, held := r.Failed[p]; !held {
			out[p] = path
		}
	}
	return out
}

// AnchorIDs are the anchors the paths with content hold, as bundle.AnchorID names
// them, sorted and once each. A held-back path counts with what it holds; one found on
// disk and not read back adds none, so a reader waiting for an anchor keeps waiting.
func (r *Rendering) AnchorIDs() []string {
	ids := map[string]bool{}
	for _, path := range r.Paths {
		for _, a := range path.Anchors {
			ids[hex.EncodeToString(a.Sum[:])] = true
		}
	}
	return slices.Sorted(maps.Keys(ids))
}

// Err summarises every held-back path in one line, paths in order.
func (r *Rendering) Err() error { return Summary(r.Failed) }

// Summary writes failures by path in one line, paths in order; nil without any.
func Summary(failed map[string]error) error {
	if len(failed) == 0 {
		return nil
	}
	paths := make([]string, 0, len(failed))
	for p := range failed {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	msgs := make([]string, 0, len(paths))
	for _, p := range paths {
		msgs = append(msgs, fmt.Sprintf("%s: %v", p, failed[p]))
	}
	return errors.New(strings.Join(msgs, "; "))
}

// State identifies what the app is given, the set of anchors of every file and the
// workload certificate, so that new bytes with the same meaning (a truststore salted
// afresh, a bundle reordered) are no change; complete says every file the app waits
// for is there.
func (r *Rendering) State() (state string, complete bool) {
	var b strings.Builder
	complete = true
	for _, g := range r.plan.paths {
		p, ok := r.Paths[g.path]
		if !ok || !p.Known {
			complete = complete && g.optional()
			continue
		}
		fmt.Fprintf(&b, "%s=%x;", g.path, p.Set)
	}
	if r.plan.certificate {
		crt, ok := r.Files[v1alpha1.FileCertificate]
		complete = complete && ok
		fmt.Fprintf(&b, "%s=%x", v1alpha1.FileCertificate, sha256.Sum256(crt.Data))
	}
	return b.String(), complete
}

// Render makes the files of plan from snap. A path whose sources fail keeps its last
// good content from last (nil: none yet) and is reported in Failed; the others are
// rendered anew. Upstream's rule, and the point of the pipeline: a workload always
// finds a complete trust file, and an error never empties one.
func Render(plan *Plan, snap Snapshot, last *Rendering) *Rendering {
	if last == nil {
		last = &Rendering{}
	}
	r := &Rendering{plan: plan, Files: map[string]File{}, Paths: map[string]Path{}, Failed: map[string]error{}, decodings: map[string]*tsbundle.Decoding{}}
	d := decoder{last: last.decodings, used: r.decodings}
	for _, g := range plan.paths {
		p, err := renderPath(plan, g, snap, last.Paths[g.path], &d)
		if err != nil {
			r.Failed[g.path] = err
			if lp, ok := last.Paths[g.path]; ok {
				r.Files[g.path] = File{Data: lp.Content, Mode: TrustFileMode}
				r.Paths[g.path] = lp
			}
			continue
		}
		r.Files[g.path] = File{Data: p.Content, Mode: TrustFileMode}
		r.Paths[g.path] = p
	}
	for name, f := range snap.Certificate {
		r.Files[name] = f
	}
	return r
}

// renderPath merges one path's items and encodes them in the path's format. An item
// that matched nothing is skipped when optional and fails the path otherwise; an item
// that is invalid fails the path whether optional or not, since it is a
// misconfiguration worth holding for.
func renderPath(plan *Plan, g pathPlan, snap Snapshot, last Path, d *decoder) (Path, error) {
	pool := tsbundle.NewPool()
	var errs []error
	for _, it := range g.items {
		anchors, err := itemAnchors(plan, it, snap, d)
		switch {
		case err == nil:
			for _, a := range anchors {
				pool.AddAnchor(a)
			}
		case isNotFound(err) && it.source.Optional:
		default:
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return Path{}, errors.Join(errs...)
	}
	p := Path{Anchors: pool.Anchors(), FirstExpiry: pool.EarliestNotAfter(), Set: pool.SetSum(), Known: true}
	if g.format != v1alpha1.FormatPEM {
		var err error
		if p.Password, err = password(plan.namespace, g, snap); err != nil {
			return Path{}, err
		}
	}
	// A file is encoded again only when what it holds changed: a truststore is salted
	// afresh at each encoding, so its file (and anything watching it) would change for
	// nothing; a PEM file would be the same bytes, encoded for the garbage collector.
	if last.Known && last.Set == p.Set && last.Password == p.Password {
		p.Content = last.Content
		return p, nil
	}
	if g.format == v1alpha1.FormatPEM {
		p.shared = sharedPEMOf(p.Set, pool)
		p.Content = p.shared.data
		return p, nil
	}
	var err error
	if p.Content, err = encodeStore(g.format, g.profile, p.Anchors, p.Password); err != nil {
		return Path{}, fmt.Errorf("cannot encode the %s truststore: %w", g.format, err)
	}
	return p, nil
}

// FromDisk is the Rendering the files a previous run left make, read back so that a
// restarted pipeline neither re-encodes a truststore nor tells the app of a change that
// is none; a file it cannot read back is kept as last good content and written anew.
// snap gives the truststores' passwords and the certificate the pipeline adopted.
func FromDisk(plan *Plan, files map[string]File, snap Snapshot) *Rendering {
	r := &Rendering{plan: plan, Files: map[string]File{}, Paths: map[string]Path{}, Failed: map[string]error{}}
	for _, g := range plan.paths {
		f, ok := files[g.path]
		if !ok {
			continue
		}
		r.Files[g.path] = f
		p := Path{Content: f.Data}
		if set, password, err := readBack(plan, g, f.Data, snap); err == nil {
			p.Set, p.Password, p.Known = set, password, true
		}
		r.Paths[g.path] = p
	}
	for name, f := range snap.Certificate {
		r.Files[name] = f
	}
	return r
}

func readBack(plan *Plan, g pathPlan, data []byte, snap Snapshot) ([sha256.Size]byte, string, error) {
	pool := tsbundle.NewPool()
	if g.format == v1alpha1.FormatPEM {
		if err := pool.AddPEM(data); err != nil {
			return [sha256.Size]byte{}, "", err
		}
		return pool.SetSum(), "", nil
	}
	pw, err := password(plan.namespace, g, snap)
	if err != nil {
		return [sha256.Size]byte{}, "", err
	}
	ders, err := decodeStore(g.format, data, pw)
	if err != nil {
		return [sha256.Size]byte{}, "", fmt.Errorf("cannot read back the truststore a previous run wrote: %w", err)
	}
	for _, der := range ders {
		pool.AddDER(der)
	}
	return pool.SetSum(), pw, nil
}
