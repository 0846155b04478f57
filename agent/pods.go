package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// NodePods are the pods on one node, from one watch of them: what the agent checks a
// publish request against (the pod is on this node, with this uid) and where it finds
// a pod's address for a reload.
type NodePods struct {
	client   kubernetes.Interface
	informer cache.SharedIndexInformer
	lister   corelisters.PodLister
}

// NewNodePods watches the pods bound to node; Run starts the watch.
func NewNodePods(client kubernetes.Interface, node string) *NodePods {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	pods := factory.Core().V1().Pods()
	return &NodePods{client: client, informer: pods.Informer(), lister: pods.Lister()}
}

// Run watches until ctx is done.
func (p *NodePods) Run(ctx context.Context) { p.informer.RunWithContext(ctx) }

// HasSynced reports whether the first list has arrived.
func (p *NodePods) HasSynced() bool { return p.informer.HasSynced() }

// Get returns the pod from the node's cache; a pod not there yet (bound a moment
// ago) is asked of the API server.
func (p *NodePods) Get(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	if pod, err := p.lister.Pods(namespace).Get(name); err == nil {
		return pod, nil
	}
	return p.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

// IP is the address of the pod with uid, from the cache.
func (p *NodePods) IP(namespace, name, uid string) (string, error) {
	pod, err := p.lister.Pods(namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		return "", fmt.Errorf("pod %s/%s is not on this node", namespace, name)
	case err != nil:
		return "", err
	case string(pod.UID) != uid:
		return "", fmt.Errorf("pod %s/%s is another pod now (uid %s, not %s)", namespace, name, pod.UID, uid)
	case pod.Status.PodIP == "":
		return "", fmt.Errorf("pod %s/%s has no IP address yet", namespace, name)
	}
	return pod.Status.PodIP, nil
}
