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

// List is every pod on the node, from the cache.
func (p *NodePods) List() []*corev1.Pod {
	objs := p.informer.GetStore().List()
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		pods = append(pods, o.(*corev1.Pod))
	}
	return pods
}

// NodeOwner is the node's Node as an owner: what is owned goes with the node.
func NodeOwner(ctx context.Context, client rest.Interface, node string) (*metav1.OwnerReference, error) {
	n := &corev1.Node{}
	if err := client.Get().Resource("nodes").Name(node).Do(ctx).Into(n); err != nil {
		return nil, fmt.Errorf("read Node %s, the owner of its trust report: %w", node, err)
	}
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}, nil
}
