package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// NodePods are the pods on one node, from one watch of them: what the agent checks a
// publish request against (the pod is on this node, with this uid) and where it finds
// a pod's address for a reload. It reads through a REST client that knows Pods alone:
// client-go's clientset registers every API group's types, several MiB of resident
// memory on every node for one resource.
type NodePods struct {
	client   rest.Interface
	informer cache.SharedIndexInformer
}

// NewNodePods watches the pods bound to node through client (kubeclient.Pods); Run
// starts the watch.
func NewNodePods(client rest.Interface, node string) *NodePods {
	lw := cache.NewListWatchFromClient(client, "pods", metav1.NamespaceAll, fields.OneTermEqualSelector("spec.nodeName", node))
	informer := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 10*time.Minute, cache.Indexers{})
	return &NodePods{client: client, informer: informer}
}

// Run watches until ctx is done.
func (p *NodePods) Run(ctx context.Context) { p.informer.RunWithContext(ctx) }

// HasSynced reports whether the first list has arrived.
func (p *NodePods) HasSynced() bool { return p.informer.HasSynced() }

// cached returns the pod from the node's cache.
func (p *NodePods) cached(namespace, name string) (*corev1.Pod, bool) {
	obj, ok, err := p.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	return obj.(*corev1.Pod), true
}

// Get returns the pod from the node's cache; a pod not there yet (bound a moment
// ago) is asked of the API server.
func (p *NodePods) Get(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	if pod, ok := p.cached(namespace, name); ok {
		return pod, nil
	}
	pod := &corev1.Pod{}
	if err := p.client.Get().Namespace(namespace).Resource("pods").Name(name).Do(ctx).Into(pod); err != nil {
		return nil, err
	}
	return pod, nil
}

// IP is the address of the pod with uid, from the cache.
func (p *NodePods) IP(namespace, name, uid string) (string, error) {
	pod, ok := p.cached(namespace, name)
	switch {
	case !ok:
		return "", fmt.Errorf("pod %s/%s is not on this node", namespace, name)
	case string(pod.UID) != uid:
		return "", fmt.Errorf("pod %s/%s is another pod now (uid %s, not %s)", namespace, name, pod.UID, uid)
	case pod.Status.PodIP == "":
		return "", fmt.Errorf("pod %s/%s has no IP address yet", namespace, name)
	}
	return pod.Status.PodIP, nil
}
