package query

import (
	"fmt"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/trustfiles"
)

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
