// Package query answers, from the nodes' reports, the pods and the bundles, the
// questions kubectl trustsync asks: does each pod hold what its sources select now,
// and who holds a given anchor. It reads nothing from the API server: the caller lists,
// so it is tested without a server (ResolveAnchor alone reads a file, the PEM a user
// names).
package query

import (
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
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
