// Package reader keeps the read model current for a long-lived process: the pods, the
// nodes' reports and the objects trustsync writes, each through one watch started the
// first time it is asked for, so that asking again (a rotation waiting, every few
// seconds) costs the API server nothing more. What it hands out is a query.Cluster,
// answered by trustreport/query like any reader's.
package reader

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/trustreport"
	"github.com/trustsync/trustsync/trustreport/query"
)

// Reader serves the read model from watches.
type Reader struct {
	Client   kubernetes.Interface
	Dynamic  dynamic.Interface
	Metadata metadata.Interface
	// Index is the controller's injected index (none where no name).
	Index types.NamespacedName
	// Resync is the watches' resync period.
	Resync time.Duration

	mu      sync.Mutex
	started bool
	pods    cache.SharedIndexInformer
	reports cache.SharedIndexInformer
	objects *TrustObjects
	// served: the reports' API is served (checked until it is).
	served bool
}

// Cluster is the read model as the watches hold it (pods, reports, the objects
// trustsync writes; the caller adds bundles). served is false where no agent reports
// (the reports' API is not served). The first call starts the watches and waits for
// their first lists; ctx bounds the wait, and the watches run until runCtx is done.
func (r *Reader) Cluster(ctx, runCtx context.Context) (c query.Cluster, served bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.start(ctx, runCtx); err != nil {
		return c, false, err
	}
	if !r.served {
		return c, false, nil
	}
	synced := []cache.InformerSynced{r.pods.HasSynced, r.reports.HasSynced}
	if r.objects != nil {
		synced = append(synced, r.objects.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return c, false, fmt.Errorf("the watches of pods and reports have not listed yet: %w", context.Cause(ctx))
	}
	listing := trustreport.FromObjects(r.reports.GetStore().List(), time.Now())
	c.Reports, c.Unreadable = listing.Reports, listing.UnreadableByNode()
	for _, obj := range r.pods.GetStore().List() {
		c.Pods = append(c.Pods, obj.(*corev1.Pod))
	}
	if r.objects != nil {
		c.Objects, _ = r.objects.Current()
		c.Targets = r.objects.Targets()
		c.Injected = r.objects.Injected()
	}
	return c, true, nil
}

// start begins the watches once the reports' API is served.
func (r *Reader) start(ctx, runCtx context.Context) error {
	if r.started {
		return nil
	}
	if _, err := r.Dynamic.Resource(v1alpha1.NodeTrustReportResource).List(ctx, metav1.ListOptions{Limit: 1}); apierrors.IsNotFound(err) {
		return nil // asked again next time: an agent may be installed later
	} else if err != nil {
		return fmt.Errorf("list NodeTrustReports: %w", err)
	}
	// Without TrustTargets served there are no trust objects, and nothing to wait for.
	var objects *TrustObjects
	if _, err := r.Dynamic.Resource(v1alpha1.TrustTargetResource).List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
		if objects, err = NewTrustObjects(TrustObjectsConfig{Dynamic: r.Dynamic, Metadata: r.Metadata, Core: r.Client.CoreV1().RESTClient(), Index: r.Index, Resync: r.Resync}); err != nil {
			return err
		}
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("list TrustTargets: %w", err)
	}
	lw := cache.NewListWatchFromClient(r.Client.CoreV1().RESTClient(), "pods", metav1.NamespaceAll, fields.Everything())
	r.pods = cache.NewSharedIndexInformer(lw, &corev1.Pod{}, r.Resync, cache.Indexers{})
	if err := r.pods.SetTransform(Slim); err != nil {
		return err
	}
	r.reports = dynamicinformer.NewFilteredDynamicInformer(r.Dynamic, v1alpha1.NodeTrustReportResource, metav1.NamespaceAll, r.Resync, cache.Indexers{}, nil).Informer()
	if err := r.reports.SetTransform(trustreport.Decode); err != nil {
		return err
	}
	go r.pods.RunWithContext(runCtx)
	go r.reports.RunWithContext(runCtx)
	if objects != nil {
		r.objects = objects
		go objects.Run(runCtx)
	}
	r.started, r.served = true, true
	return nil
}

// Slim keeps of a pod what the read model reads (which trust it reads and how, where
// it runs, whether it started), so that a cache of every pod of a large cluster
// costs a fraction of the pods themselves. Other objects pass unchanged.
func Slim(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			DeletionTimestamp: pod.DeletionTimestamp, Annotations: trustsyncAnnotations(pod.Annotations)},
		Spec: corev1.PodSpec{NodeName: pod.Spec.NodeName, Volumes: pod.Spec.Volumes,
			InitContainers: slimContainers(pod.Spec.InitContainers), Containers: slimContainers(pod.Spec.Containers)},
		Status: corev1.PodStatus{Phase: pod.Status.Phase,
			InitContainerStatuses: slimStatuses(pod.Status.InitContainerStatuses), ContainerStatuses: slimStatuses(pod.Status.ContainerStatuses)},
	}
	for _, c := range pod.Spec.EphemeralContainers {
		out.Spec.EphemeralContainers = append(out.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: c.Name, Env: envRefs(c.Env), EnvFrom: c.EnvFrom}})
	}
	return out, nil
}

func trustsyncAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if strings.HasPrefix(k, "trustsync.io/") {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

func slimContainers(in []corev1.Container) []corev1.Container {
	out := make([]corev1.Container, len(in))
	for i, c := range in {
		out[i] = corev1.Container{Name: c.Name, Args: c.Args, VolumeMounts: c.VolumeMounts, Env: envRefs(c.Env), EnvFrom: c.EnvFrom, RestartPolicy: c.RestartPolicy}
	}
	return out
}

// envRefs keeps the variables read from an object; literal values are dropped.
func envRefs(in []corev1.EnvVar) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, e := range in {
		if e.ValueFrom != nil && (e.ValueFrom.ConfigMapKeyRef != nil || e.ValueFrom.SecretKeyRef != nil) {
			out = append(out, corev1.EnvVar{Name: e.Name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: e.ValueFrom.ConfigMapKeyRef, SecretKeyRef: e.ValueFrom.SecretKeyRef}})
		}
	}
	return out
}

func slimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, len(in))
	for i, s := range in {
		out[i] = corev1.ContainerStatus{Name: s.Name, State: s.State, LastTerminationState: s.LastTerminationState, RestartCount: s.RestartCount}
	}
	return out
}
