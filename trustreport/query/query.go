// Package query answers, from the nodes' reports, the pods and the bundles, the
// questions kubectl trustsync asks: does each pod hold what its sources select now,
// and who holds a given anchor. It reads nothing from the API server: the caller lists,
// so it is tested without a server (ResolveAnchor alone reads a file, the PEM a user
// names).
package query

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/tenancy"
	"github.com/trustsync/trustsync/trustfiles"
)

// States of a trust file.
const (
	UpToDate    = "UpToDate"
	Behind      = "Behind"
	NotObserved = "NotObserved"
	Unreadable  = "Unreadable"
	// NotObservable: read through env or envFrom, resolved when the container
	// started; no one can see what the process holds since, so a rotation waits its
	// floor for it.
	NotObservable = "NotObservable"
)

// DeliveryEnv is how an env or envFrom reading of a trust object shows among the
// deliveries.
const DeliveryEnv = "env"

// Cluster is what the questions are asked of.
type Cluster struct {
	Pods    []*corev1.Pod
	Reports []*v1alpha1.NodeTrustReport
	// Bundles are every bundle, of both APIs, in upstream form.
	Bundles []*certificatesv1.ClusterTrustBundle
	// Changed is when each bundle (by name) last changed, where known.
	Changed map[string]time.Time
	// Unreadable says, by node, why its report could not be read: its pods are
	// not observed.
	Unreadable map[string]string
	// Objects are the ConfigMaps and Secrets trustsync writes: their keys mounted by
	// a pod are its trust files too, and read through env they are consumers no
	// one can observe.
	Objects trustfiles.Objects
	// Contents are what the objects trustsync writes hold, key by key, where the
	// caller could read them: TrustTargets' and annotated ConfigMaps and Secrets,
	// and injected caBundle fields.
	Contents []ObjectContent
	// Targets are the TrustTargets, with the status their controller wrote: what
	// their objects hold, and in how many of the namespaces they select.
	Targets []*v1alpha1.TrustTarget
	// Injected is the controller's index of the annotated objects it fills, with
	// what each holds (nil where none is read).
	Injected *v1alpha1.InjectedIndex
	// Grants are what each namespace is granted, where TrustPolicies exist (nil:
	// none, and nothing is flagged); a namespace absent (trustsync's own) is exempt.
	Grants map[string]tenancy.Grants
}

// Ungranted are the anchors of anchors that the namespace is no longer granted: some
// bundle holds each, and no bundle the namespace is granted does. An anchor no bundle
// holds came from elsewhere (the namespace's own ConfigMap, the public roots) and is
// never flagged.
func (c Cluster) Ungranted(namespace string, anchors []string) []string {
	return c.ungranted(c.holdersOfAnchors(), namespace, anchors)
}

// holdersOfAnchors maps each anchor to the bundles holding it, each bundle parsed
// once for a whole answer; nil where there are no grants to compare.
func (c Cluster) holdersOfAnchors() map[string][]*certificatesv1.ClusterTrustBundle {
	if c.Grants == nil {
		return nil
	}
	out := map[string][]*certificatesv1.ClusterTrustBundle{}
	for _, b := range c.Bundles {
		ids, _ := bundle.AnchorIDs([]byte(b.Spec.TrustBundle))
		for _, id := range ids {
			out[id] = append(out[id], b)
		}
	}
	return out
}

func (c Cluster) ungranted(holders map[string][]*certificatesv1.ClusterTrustBundle, namespace string, anchors []string) []string {
	g, ok := c.Grants[namespace]
	if !ok {
		return nil
	}
	var out []string
	for _, a := range anchors {
		bundles := holders[a]
		granted := slices.ContainsFunc(bundles, func(b *certificatesv1.ClusterTrustBundle) bool {
			_, err := g.Bundle(tenancy.Bundle{Name: b.Name, SignerName: b.Spec.SignerName, Labels: b.Labels})
			return err == nil
		})
		if len(bundles) > 0 && !granted {
			out = append(out, a)
		}
	}
	return out
}

// ObjectContent is one key of an object trustsync writes (a ConfigMap's or
// Secret's key, or a caBundle field) and the anchors it holds.
type ObjectContent struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Key       string `json:"key"`
	// Writer is who fills it: "TrustTarget NAME", or "annotation" for an object
	// annotated trustsync.io/inject.
	Writer string `json:"writer"`
	// Anchors are the anchor IDs it holds, sorted.
	Anchors []string `json:"-"`
}

// ObjectsHolding lists the objects' keys that hold anchor, in namespace ("" for
// every namespace and the cluster-scoped objects).
func (c Cluster) ObjectsHolding(anchor, namespace string) []Holder {
	holders := c.holdersOfAnchors()
	var out []Holder
	for _, o := range c.Contents {
		if (namespace == "" || o.Namespace == namespace) && slices.Contains(o.Anchors, anchor) {
			out = append(out, Holder{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Key: o.Key, Writer: o.Writer,
				NotGranted: len(c.ungranted(holders, o.Namespace, []string{anchor})) > 0})
		}
	}
	slices.SortFunc(out, func(a, b Holder) int {
		return strings.Compare(a.Namespace+"/"+a.Kind+"/"+a.Name+"/"+a.Key, b.Namespace+"/"+b.Kind+"/"+b.Name+"/"+b.Key)
	})
	return out
}

// EnvHolders lists the running pods (in namespace, "" for every one) reading a trust
// object through env or envFrom: what they hold cannot be seen, so after a compromise
// each may still hold any anchor its object held when it started.
func (c Cluster) EnvHolders(namespace string) []Straggler {
	var out []Straggler
	for _, pod := range c.Pods {
		if (namespace != "" && pod.Namespace != namespace) || !running(pod) {
			continue
		}
		var how []string
		for _, r := range trustfiles.EnvReaders(pod, c.Objects) {
			how = append(how, r.Describe())
		}
		if len(how) > 0 {
			out = append(out, Straggler{Namespace: pod.Namespace, Pod: pod.Name, Node: pod.Spec.NodeName, Reason: NotObservable, Detail: strings.Join(how, "; ")})
		}
	}
	slices.SortFunc(out, byPod)
	return out
}

// byPod orders stragglers by namespace and pod.
func byPod(a, b Straggler) int { return strings.Compare(a.Namespace+"/"+a.Pod, b.Namespace+"/"+b.Pod) }

// files are the pod's trust files: trustsync's and the kubelet's, and the keys of
// trust objects it mounts.
func (c Cluster) files(pod *corev1.Pod) []trustfiles.TrustFile { return trustfiles.Of(pod, c.Objects) }

// byNode is the reports by node name. A report speaks for its own node alone: one
// whose node is not its name is no node's.
func (c Cluster) byNode() map[string]*v1alpha1.NodeTrustReport {
	reports := make(map[string]*v1alpha1.NodeTrustReport, len(c.Reports))
	for _, r := range c.Reports {
		if r.Node == r.Name {
			reports[r.Name] = r
		}
	}
	return reports
}

// noReport says why a pod on node is not observed where its node has no usable
// report.
func (c Cluster) noReport(node string) string {
	if why, ok := c.Unreadable[node]; ok {
		return why
	}
	return "no report from node " + node + " (no agent there, or reports turned off)"
}

// started reports whether any of the pod's containers (an init or sidecar container
// included) ever ran: a pod none of whose containers started holds no trust yet,
// and will read the current bundles when it starts.
func started(pod *corev1.Pod) bool {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			if cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil || cs.RestartCount > 0 {
				return true
			}
		}
	}
	return false
}

// alive reports whether the pod is on a node, not finished and not going.
func alive(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed && pod.DeletionTimestamp == nil
}

// running reports whether the pod may hold trust: alive, and started.
func running(pod *corev1.Pod) bool { return alive(pod) && started(pod) }

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

// Holder is one pod's file holding an anchor, or one key of an object trustsync
// writes (Kind, Name, Key, Writer; no pod).
type Holder struct {
	Namespace string     `json:"namespace,omitempty"`
	Pod       string     `json:"pod,omitempty"`
	Node      string     `json:"node,omitempty"`
	Path      string     `json:"path,omitempty"`
	Delivery  string     `json:"delivery,omitempty"`
	ChangedAt *time.Time `json:"changedAt,omitempty"`
	Kind      string     `json:"kind,omitempty"`
	Name      string     `json:"name,omitempty"`
	Key       string     `json:"key,omitempty"`
	Writer    string     `json:"writer,omitempty"`
	// NotGranted: the holder's namespace is no longer granted any bundle holding
	// the anchor (a TrustPolicy changed since it was written).
	NotGranted bool `json:"notGranted,omitempty"`
}

// WhoTrusts lists every pod's file that holds anchor, by namespace, pod and path;
// namespace "" is every namespace. A report speaks for the pods its node runs: a pod
// counts only in the report of the node its spec names.
func (c Cluster) WhoTrusts(anchor, namespace string) []Holder {
	holders := c.holdersOfAnchors()
	reports := c.byNode()
	var out []Holder
	for _, pod := range c.Pods {
		if namespace != "" && pod.Namespace != namespace {
			continue
		}
		r := reports[pod.Spec.NodeName]
		held, ok := podIn(r, pod)
		if !ok {
			continue
		}
		for _, f := range held.Files {
			set, ok := r.Set(f.AnchorSet)
			if !ok || !slices.Contains(set.Anchors, anchor) {
				continue
			}
			h := Holder{Namespace: pod.Namespace, Pod: pod.Name, Node: r.Node, Path: f.Path, Delivery: f.Delivery,
				NotGranted: len(c.ungranted(holders, pod.Namespace, []string{anchor})) > 0}
			if f.ChangedAt != nil {
				t := f.ChangedAt.Time
				h.ChangedAt = &t
			}
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(a, b Holder) int {
		return strings.Compare(a.Namespace+"/"+a.Pod+"/"+a.Path, b.Namespace+"/"+b.Pod+"/"+b.Path)
	})
	return out
}

// podIn is the pod's entry in its node's report r.
func podIn(r *v1alpha1.NodeTrustReport, pod *corev1.Pod) (v1alpha1.PodHolding, bool) {
	if r == nil {
		return v1alpha1.PodHolding{}, false
	}
	for _, p := range r.Pods {
		if p.UID == string(pod.UID) {
			return p, true
		}
	}
	return v1alpha1.PodHolding{}, false
}

// Unseen is what an answer could not see: running pods with trust files on one node
// that are in no readable report.
type Unseen struct {
	Node string `json:"node"`
	// Pods are namespace/name.
	Pods   []string `json:"pods"`
	Reason string   `json:"reason"`
}

// Unseen lists, by node, the running pods with trust files (in namespace, "" for
// every one) that no readable report covers: "nobody holds it" is an answer only
// where this is empty.
func (c Cluster) Unseen(namespace string) []Unseen {
	reports := c.byNode()
	byNode := map[string]*Unseen{}
	for _, pod := range c.Pods {
		if (namespace != "" && pod.Namespace != namespace) || !running(pod) || len(c.files(pod)) == 0 {
			continue
		}
		node := pod.Spec.NodeName
		r := reports[node]
		if _, ok := podIn(r, pod); ok {
			continue
		}
		u, ok := byNode[node]
		if !ok {
			u = &Unseen{Node: node, Reason: "not in node " + node + "'s report yet"}
			if r == nil {
				u.Reason = c.noReport(node)
			}
			byNode[node] = u
		}
		u.Pods = append(u.Pods, pod.Namespace+"/"+pod.Name)
	}
	out := make([]Unseen, 0, len(byNode))
	for _, u := range byNode {
		slices.Sort(u.Pods)
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b Unseen) int { return strings.Compare(a.Node, b.Node) })
	return out
}

var hexPrefix = regexp.MustCompile(`^[0-9a-fA-F:]+$`)

// MinPrefix is the shortest anchor prefix taken: 12 hex digits, 48 bits.
const MinPrefix = 12

// CheckAnchorArg says whether arg can name an anchor at all (a readable PEM file of
// certificates, or a SHA-256 in hex or a long enough prefix of one), so that a
// mistyped argument is refused before anything is read from the cluster.
func CheckAnchorArg(arg string) error {
	if data, err := os.ReadFile(arg); err == nil {
		ids, err := bundle.AnchorIDs(data)
		if err != nil {
			return fmt.Errorf("%s is not a PEM file of certificates: %w", arg, err)
		}
		if len(ids) == 0 {
			return fmt.Errorf("%s holds no certificate", arg)
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if !hexPrefix.MatchString(arg) {
		return fmt.Errorf("%q is neither a file nor a SHA-256 in hex: give a PEM file, or the anchor's SHA-256 (openssl x509 -noout -fingerprint -sha256), or at least %d of its first hex digits", arg, MinPrefix)
	}
	prefix := strings.ReplaceAll(arg, ":", "")
	switch {
	case len(prefix) > 64:
		return fmt.Errorf("%q has %d hex digits; a SHA-256 has 64", arg, len(prefix))
	case len(prefix) < MinPrefix:
		return fmt.Errorf("%q is too short a prefix: give at least %d hex digits", arg, MinPrefix)
	}
	return nil
}

// ResolveAnchor turns what the user gave into anchor IDs: a PEM file's certificates,
// or a SHA-256 in hex (colons allowed, as openssl prints it), or a prefix of at least
// MinPrefix digits that names one anchor among those the reports and bundles know.
func (c Cluster) ResolveAnchor(arg string) ([]string, error) {
	if err := CheckAnchorArg(arg); err != nil {
		return nil, err
	}
	if data, err := os.ReadFile(arg); err == nil {
		return bundle.AnchorIDs(data)
	}
	prefix := strings.ToLower(strings.ReplaceAll(arg, ":", ""))
	if len(prefix) == 64 {
		return []string{prefix}, nil
	}
	var found []string
	for _, id := range c.knownAnchors() {
		if strings.HasPrefix(id, prefix) && !slices.Contains(found, id) {
			found = append(found, id)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("no anchor held by a pod or in a bundle starts with %s", prefix)
	case 1:
		return found, nil
	}
	return nil, fmt.Errorf("prefix %s names %d anchors (%s); give more digits", prefix, len(found), strings.Join(found, ", "))
}

func (c Cluster) knownAnchors() []string {
	var ids []string
	for _, r := range c.Reports {
		for _, s := range r.AnchorSets {
			ids = append(ids, s.Anchors...)
		}
	}
	for _, b := range c.Bundles {
		more, _ := bundle.AnchorIDs([]byte(b.Spec.TrustBundle))
		ids = append(ids, more...)
	}
	for _, o := range c.Contents {
		ids = append(ids, o.Anchors...)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// Progress is how far an anchor has reached the pods that select a bundle.
type Progress struct {
	// Holding of Expected pods hold the anchor in every trust file that selects the
	// bundle.
	Holding  int `json:"holding"`
	Expected int `json:"expected"`
	// Stragglers are the pods that do not, each with why.
	Stragglers []Straggler `json:"stragglers"`
	// NotStarted are the pods selecting the bundle none of whose containers has
	// started (namespace/name): not waited for, since they will read the current
	// bundle when they start.
	NotStarted []string `json:"notStarted,omitempty"`
	// NotObservable are the running pods reading a trust object that selects the
	// bundle through env or envFrom: what they hold cannot be seen, so a rotation
	// waits its floor for them.
	NotObservable []Straggler `json:"notObservable,omitempty"`
	// Objects are the objects trustsync writes from the bundle, a TrustTarget at a
	// time and each annotated object (caBundle fields included): whoever reads them
	// (a volume the kubelet refreshes, env, a controller or an API server through
	// the API) gets what they hold, so they are waited for like pods.
	Objects []ObjectProgress `json:"objects,omitempty"`
	// Unobserved says which objects' readers cannot be told at all (annotated
	// objects the controller's index leaves out, or an index that does not read):
	// a rotation waits its floor for them.
	Unobserved []string `json:"unobserved,omitempty"`
	// NotGranted are the pods (namespace/name) whose trust files select the bundle
	// in a namespace not granted it (TrustPolicies): not waited for, since trustsync
	// delivers them none of it, whatever the pod says of itself.
	NotGranted []string `json:"notGranted,omitempty"`
	// Skipped are the pods an operator told the rotation not to wait for
	// (Skip), with why each was behind.
	Skipped []Straggler `json:"skipped,omitempty"`
}

// Skip stops waiting for the pods named (namespace/name, or namespace/* for every
// pod of a namespace): those behind or not observable are moved to Skipped and no
// longer counted. An operator ends a forced rotation's wait for known stragglers
// this way, never the signer of its own accord.
func (p *Progress) Skip(pods []string) {
	if len(pods) == 0 {
		return
	}
	skipped := func(s Straggler) bool {
		return slices.Contains(pods, s.Namespace+"/"+s.Pod) || slices.Contains(pods, s.Namespace+"/*")
	}
	keep := p.Stragglers[:0]
	for _, s := range p.Stragglers {
		if skipped(s) {
			p.Skipped = append(p.Skipped, s)
			p.Expected--
			continue
		}
		keep = append(keep, s)
	}
	p.Stragglers = keep
	p.NotObservable = slices.DeleteFunc(p.NotObservable, func(s Straggler) bool {
		if skipped(s) {
			p.Skipped = append(p.Skipped, s)
			return true
		}
		return false
	})
	slices.SortFunc(p.Skipped, byPod)
}

// ObjectProgress is how many of the objects one TrustTarget writes (one in each
// namespace it selects) hold the anchor, by its controller's status; or whether one
// annotated object does (Writer "annotation", Expected 1), by the controller's
// index.
type ObjectProgress struct {
	Kind string `json:"kind"`
	// Namespace is an annotated object's; a TrustTarget's objects are in many.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Writer    string `json:"writer"`
	Holding   int    `json:"holding"`
	Expected  int    `json:"expected"`
	// Detail says why not all hold it.
	Detail string `json:"detail,omitempty"`
}

// Done reports whether every pod and every object counted holds the anchor.
func (p Progress) Done() bool { return p.Holding == p.Expected && len(p.ObjectsBehind()) == 0 }

// ObjectsBehind are the objects' progresses that are not complete.
func (p Progress) ObjectsBehind() []ObjectProgress {
	var out []ObjectProgress
	for _, o := range p.Objects {
		if o.Holding < o.Expected {
			out = append(out, o)
		}
	}
	return out
}

// Straggler is a pod that selects the bundle and is not seen holding the anchor, or
// whose holding cannot be seen at all.
type Straggler struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Node      string `json:"node,omitempty"`
	// Reason: NotObserved (no report from its node, or not in it yet), Unreadable,
	// Behind, or NotObservable.
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// Progress says which pods selecting any of bundles (by their trust files' bundle
// sources) hold anchor. Pods not running (finished, not scheduled, or none of their
// containers started) are not counted: they hold nothing and will read the bundle
// when they start; those not started are listed.
func (c Cluster) Progress(anchor string, bundles []*certificatesv1.ClusterTrustBundle) Progress {
	reports := c.byNode()
	p := Progress{Stragglers: []Straggler{}}
	for _, pod := range c.Pods {
		if !alive(pod) {
			continue
		}
		var files []trustfiles.TrustFile
		var env []string
		for _, tf := range c.files(pod) {
			switch {
			case !selectsAny(tf.Sources, bundles):
			case trustfiles.PasswordSecret(tf) != nil:
				env = append(env, tf.Path()+" is a truststore whose password is in a Secret, which the agent does not read")
			default:
				files = append(files, tf)
			}
		}
		for _, r := range trustfiles.EnvReaders(pod, c.Objects) {
			if selectsAny(r.Sources, bundles) {
				env = append(env, r.Describe()+", resolved when it started")
			}
		}
		if len(files) == 0 && len(env) == 0 {
			continue
		}
		if !c.grantedAny(pod.Namespace, bundles) {
			p.NotGranted = append(p.NotGranted, pod.Namespace+"/"+pod.Name)
			continue
		}
		if !started(pod) {
			p.NotStarted = append(p.NotStarted, pod.Namespace+"/"+pod.Name)
			continue
		}
		if len(env) > 0 {
			p.NotObservable = append(p.NotObservable, Straggler{Namespace: pod.Namespace, Pod: pod.Name, Node: pod.Spec.NodeName, Reason: NotObservable,
				Detail: strings.Join(env, "; ")})
		}
		if len(files) == 0 {
			continue
		}
		p.Expected++
		s := Straggler{Namespace: pod.Namespace, Pod: pod.Name, Node: pod.Spec.NodeName}
		for _, tf := range files {
			o := c.observe(reports, pod, tf)
			switch {
			case o.state != "":
				s.Reason, s.Detail = o.state, tf.Path()+": "+o.reason
			case !slices.Contains(o.set.Anchors, anchor):
				s.Reason, s.Detail = Behind, tf.Path()+" does not hold it"
			default:
				continue
			}
			break
		}
		if s.Reason == "" {
			p.Holding++
		} else {
			p.Stragglers = append(p.Stragglers, s)
		}
	}
	p.Objects = c.objectsProgress(anchor, bundles)
	p.Unobserved = c.unindexed()
	slices.SortFunc(p.Stragglers, byPod)
	slices.Sort(p.NotStarted)
	slices.Sort(p.NotGranted)
	slices.SortFunc(p.NotObservable, byPod)
	return p
}

// grantedAny says whether namespace is granted one of bundles: always without
// grants, or for an exempt namespace.
func (c Cluster) grantedAny(namespace string, bundles []*certificatesv1.ClusterTrustBundle) bool {
	g, ok := c.Grants[namespace]
	if !ok {
		return true
	}
	return slices.ContainsFunc(bundles, func(b *certificatesv1.ClusterTrustBundle) bool {
		_, err := g.Bundle(tenancy.Bundle{Name: b.Name, SignerName: b.Spec.SignerName, Labels: b.Labels})
		return err == nil
	})
}

// objectsProgress counts, for each TrustTarget whose sources select one of bundles,
// the objects it writes that hold anchor: all those its status says are synced when
// the current content holds anchor, none otherwise. A target its controller has not
// written yet counts no object, since none exists to be read.
func (c Cluster) objectsProgress(anchor string, bundles []*certificatesv1.ClusterTrustBundle) []ObjectProgress {
	var out []ObjectProgress
	for _, t := range c.Targets {
		spec, err := v1alpha1.ParseTrustTargetSpec(&t.Spec)
		if err != nil || !selectsAny(spec.Sources, bundles) || t.Status.Namespaces == 0 {
			continue
		}
		o := ObjectProgress{Kind: spec.Kind, Name: spec.Name, Writer: v1alpha1.TrustTargetKind + " " + t.Name, Expected: t.Status.Namespaces}
		switch {
		case !slices.Contains(t.Status.Anchors, anchor):
			o.Detail = "its content does not hold it yet"
		default:
			o.Holding = min(t.Status.Synced, o.Expected)
			if o.Holding < o.Expected {
				o.Detail = fmt.Sprintf("not written in %d of them", o.Expected-o.Holding)
				if len(t.Status.Failures) > 0 {
					o.Detail += fmt.Sprintf(", first %s: %s", t.Status.Failures[0].Namespace, t.Status.Failures[0].Message)
				}
			}
		}
		out = append(out, o)
	}
	if c.Injected != nil {
		for _, obj := range c.Injected.Objects {
			if !selectsAny(obj.Sources, bundles) {
				continue
			}
			o := ObjectProgress{Kind: obj.Kind, Name: obj.Name, Namespace: obj.Namespace, Writer: v1alpha1.WriterAnnotation, Expected: 1}
			if slices.Contains(obj.Anchors, anchor) {
				o.Holding = 1
			} else {
				o.Detail = "its content does not hold it yet"
			}
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b ObjectProgress) int {
		return strings.Compare(a.Writer+"\x00"+a.Kind+"\x00"+a.Namespace+"\x00"+a.Name, b.Writer+"\x00"+b.Kind+"\x00"+b.Namespace+"\x00"+b.Name)
	})
	return out
}

// unindexed says why annotated objects cannot be counted: the index leaves some out,
// or does not read.
func (c Cluster) unindexed() []string {
	switch {
	case c.Injected == nil:
		return nil
	case c.Injected.Unreadable != "":
		return []string{"the controller's index of annotated objects does not read in full (" + c.Injected.Unreadable + "): the readers of what it leaves out are not observed"}
	case c.Injected.Omitted > 0:
		return []string{fmt.Sprintf("%d annotated objects are not in the controller's index (it is full): their readers are not observed", c.Injected.Omitted)}
	}
	return nil
}

// selectsAny reports whether one of sources selects one of bundles.
func selectsAny(sources []v1alpha1.Source, bundles []*certificatesv1.ClusterTrustBundle) bool {
	for _, s := range sources {
		sel, ok := s.Selector()
		if !ok {
			continue
		}
		match, err := sel.Matcher()
		if err != nil {
			continue
		}
		for _, b := range bundles {
			if match(b) {
				return true
			}
		}
	}
	return false
}

// HoldingAll counts the running pods selecting any of bundles (Expected) and those
// of them holding every one of anchors (Holding): how far a set of anchors, a peer
// trust domain's say, has reached.
func (c Cluster) HoldingAll(anchors []string, bundles []*certificatesv1.ClusterTrustBundle) (holding, expected int) {
	behind := map[string]bool{}
	for i, a := range anchors {
		p := c.Progress(a, bundles)
		if i == 0 {
			expected = p.Expected
		}
		for _, s := range p.Stragglers {
			behind[s.Namespace+"/"+s.Pod] = true
		}
	}
	return expected - len(behind), expected
}
