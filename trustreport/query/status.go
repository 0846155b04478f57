package query

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/trustfiles"
)

// FileStatus is one trust file of one pod: what it holds against what its sources
// select now.
type FileStatus struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Node      string `json:"node"`
	Delivery  string `json:"delivery"`
	Path      string `json:"path"`
	State     string `json:"state"`
	// Holds and Expected count anchors; Missing and Unexpected name the difference.
	Holds      int      `json:"holds"`
	Expected   int      `json:"expected"`
	Missing    []string `json:"missing,omitempty"`
	Unexpected []string `json:"unexpected,omitempty"`
	// OnlyBundlesCompared: the file also takes anchors from ConfigMaps, Secrets or the public
	// roots, which are not compared; it is up to date when it holds every bundle anchor.
	OnlyBundlesCompared bool `json:"onlyBundlesCompared,omitempty"`
	// ChangedAt is when the file last changed; BehindSince when the sources last
	// changed, for a file behind them.
	ChangedAt   *time.Time `json:"changedAt,omitempty"`
	BehindSince *time.Time `json:"behindSince,omitempty"`
	// CaughtUpAfter is how long after its sources' last change the file took it:
	// the delivery's latency, as observed on the node.
	CaughtUpAfter *Seconds `json:"caughtUpAfterSeconds,omitempty"`
	Reason        string   `json:"reason,omitempty"`
	// NotGranted are the anchors the file holds that its namespace is no longer
	// granted (a TrustPolicy changed since they were written).
	NotGranted []string `json:"notGranted,omitempty"`
}

// Seconds is a duration in seconds.
type Seconds float64

// Status compares every trust file of the pods with what its sources select now.
func (c Cluster) Status() []FileStatus {
	holders := c.holdersOfAnchors()
	reports := c.byNode()
	var out []FileStatus
	for _, pod := range c.Pods {
		for _, tf := range c.files(pod) {
			fs := FileStatus{Namespace: pod.Namespace, Pod: pod.Name, Node: pod.Spec.NodeName, Delivery: string(tf.Delivery), Path: tf.Path()}
			expected, since, onlyBundles := c.expected(tf)
			fs.Expected, fs.OnlyBundlesCompared = len(expected), onlyBundles
			o := c.observe(reports, pod, tf)
			if o.held.ChangedAt != nil {
				t := o.held.ChangedAt.Time
				fs.ChangedAt = &t
			}
			if fs.State, fs.Reason = o.state, o.reason; o.state == "" {
				c.compare(&fs, o.set, expected, since)
				fs.NotGranted = c.ungranted(holders, pod.Namespace, o.set.Anchors)
			}
			out = append(out, fs)
		}
		for _, r := range trustfiles.EnvReaders(pod, c.Objects) {
			out = append(out, FileStatus{Namespace: pod.Namespace, Pod: pod.Name, Node: pod.Spec.NodeName, Delivery: DeliveryEnv, Path: r.Container + ": " + r.Kind + " " + r.Object,
				State: NotObservable, Reason: r.Describe() + ": resolved when the container started, not observable; a rotation waits its floor for it"})
		}
	}
	return out
}

// observation is what the reports tell of one trust file of one pod: the file and
// its anchor set where they can be compared, or the state (NotObserved, Unreadable)
// that says why not. Status and Progress classify files by it alike.
type observation struct {
	held          v1alpha1.FileHolding
	set           v1alpha1.AnchorSet
	state, reason string
}

func (c Cluster) observe(reports map[string]*v1alpha1.NodeTrustReport, pod *corev1.Pod, tf trustfiles.TrustFile) observation {
	r := reports[pod.Spec.NodeName]
	held, ok := observed(r, pod, tf)
	if ok && held.ChangedAt != nil && held.ChangedAt.After(r.UpdatedAt.Add(time.Second)) {
		// A file cannot have changed after the report that describes it was written
		// (updatedAt is cut to the second): a time from a skewed or lying clock is
		// not known, rather than printed as a latency of centuries.
		held.ChangedAt = nil
	}
	o := observation{held: held}
	switch {
	case pod.Spec.NodeName == "":
		o.state, o.reason = NotObserved, "not scheduled"
	case r == nil:
		o.state, o.reason = NotObserved, c.noReport(pod.Spec.NodeName)
	case !ok:
		o.state, o.reason = NotObserved, "not in node "+pod.Spec.NodeName+"'s report yet"
	case held.Error != "":
		o.state, o.reason = Unreadable, held.Error
	default:
		o.set, _ = r.Set(held.AnchorSet)
		if o.set.Elided {
			o.state, o.reason = NotObserved, "the node's report left this file's anchors out (too many distinct sets on the node)"
		}
	}
	return o
}

// compare sets the state of a file whose anchors are known: UpToDate or Behind.
func (c Cluster) compare(fs *FileStatus, set v1alpha1.AnchorSet, expected []string, since time.Time) {
	fs.Holds = len(set.Anchors)
	for _, a := range expected {
		if !slices.Contains(set.Anchors, a) {
			fs.Missing = append(fs.Missing, a)
		}
	}
	if !fs.OnlyBundlesCompared {
		for _, a := range set.Anchors {
			if !slices.Contains(expected, a) {
				fs.Unexpected = append(fs.Unexpected, a)
			}
		}
	}
	if len(fs.Missing) > 0 || len(fs.Unexpected) > 0 {
		fs.State = Behind
		if !since.IsZero() {
			fs.BehindSince = &since
		}
		return
	}
	fs.State = UpToDate
	if !since.IsZero() && fs.ChangedAt != nil && !fs.ChangedAt.Before(since) {
		d := Seconds(fs.ChangedAt.Sub(since).Seconds())
		fs.CaughtUpAfter = &d
	}
}

// expected is what the file's bundle sources select now, when the newest of them
// changed, and whether other kinds of source feed the file too.
func (c Cluster) expected(tf trustfiles.TrustFile) (anchors []string, since time.Time, onlyBundles bool) {
	for _, s := range tf.Sources {
		sel, ok := s.Selector()
		if !ok {
			onlyBundles = true
			continue
		}
		match, err := sel.Matcher()
		if err != nil {
			continue
		}
		for _, b := range c.Bundles {
			if !match(b) {
				continue
			}
			ids, err := bundle.AnchorIDs([]byte(b.Spec.TrustBundle))
			if err != nil {
				continue
			}
			anchors = append(anchors, ids...)
			if t := c.Changed[b.Name]; t.After(since) {
				since = t
			}
		}
	}
	slices.Sort(anchors)
	return slices.Compact(anchors), since, onlyBundles
}

// observed finds the pod's file in its node's report.
func observed(r *v1alpha1.NodeTrustReport, pod *corev1.Pod, tf trustfiles.TrustFile) (v1alpha1.FileHolding, bool) {
	p, ok := podIn(r, pod)
	if !ok {
		return v1alpha1.FileHolding{}, false
	}
	container := ""
	if tf.SubPath != nil {
		container = tf.SubPath.Container
	}
	for _, f := range p.Files {
		if f.Volume == tf.Volume && f.File == tf.File && f.SubPathContainer == container {
			return f, true
		}
	}
	return v1alpha1.FileHolding{}, false
}
