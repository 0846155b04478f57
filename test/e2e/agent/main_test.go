// Package agent tests trustsync-agent end to end without a kubelet: the real binary,
// run as the chart's ServiceAccount with the chart's RBAC, against a real
// kube-apiserver, and asked to publish and unpublish volumes through its CSI socket
// exactly as the kubelet asks (the pod's identity and token in the attributes, a
// target under a pod directory). The pods are real API objects, made by the injector
// from their annotations and bound to the agent's node; no kubelet runs them, so the
// test reads their files where the kubelet would have mounted them.
package agent

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/test/controlplane"
)

var planes = controlplane.Shared{Setup: setup}

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		// The agent mounts (a tmpfs, and each volume at its target), as on a node.
		// Passing without running would read as proven; skipping is a choice the
		// caller states.
		if os.Getenv("TRUSTSYNC_SKIP_ROOT_SUITES") != "" {
			os.Stderr.WriteString("--- SKIP: test/e2e/agent: not root, and TRUSTSYNC_SKIP_ROOT_SUITES is set: nothing of the agent was tested\n")
			os.Exit(0)
		}
		os.Stderr.WriteString("FAIL: test/e2e/agent needs root (the agent mounts, as on a node): run it as root, as CI does, or set TRUSTSYNC_SKIP_ROOT_SUITES=1 to skip it knowingly\n")
		os.Exit(1)
	}
	planes.Main(m)
}

const (
	namespace = "apps"
	// agentNamespace is where the chart is rendered for, and the agent's
	// ServiceAccount lives.
	agentNamespace = "trustsync-system"
	nodeName       = "node-e2e"
	otherNode      = "node-other"
	// agentPod is the agent's pod on nodeName, whose token the agent uses.
	agentPod = "trustsync-agent-node-e2e"
)

// setup installs the mirror CRD, the chart's agent objects (its ServiceAccount, RBAC
// and CSIDriver), and the apps namespace where ServiceAccount web may read ConfigMap
// extra-cas and Secret store-pass, and ServiceAccount other may read nothing.
func setup(cp *controlplane.ControlPlane, _ bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cp.InstallMirrorCRD(ctx); err != nil {
		return err
	}
	if err := cp.InstallReportsCRD(ctx); err != nil {
		return err
	}
	for _, ns := range []string{namespace, agentNamespace} {
		if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
			return err
		}
	}
	rendered, err := controlplane.RenderChart("--namespace", agentNamespace, "--show-only", "templates/agent.yaml")
	if err != nil {
		return err
	}
	if _, err := controlplane.Apply(ctx, cp.AdminConfig(), rendered); err != nil {
		return err
	}
	for _, sa := range []string{"web", "other"} {
		if err := cp.CreateServiceAccount(ctx, namespace, sa); err != nil {
			return err
		}
	}
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	// The agent's node, and the agent's pod on it (never run: the agent runs as a
	// process, with a token bound to this pod, which carries the node's name).
	for _, node := range []string{nodeName, otherNode} {
		if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if _, err := client.CoreV1().Pods(agentNamespace).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: agentPod},
		Spec: corev1.PodSpec{ServiceAccountName: "trustsync-agent", NodeName: nodeName, Containers: []corev1.Container{{Name: "agent", Image: "registry.example/trustsync:test"}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := client.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "web-trust-sources"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"extra-cas"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"store-pass"}, Verbs: []string{"get", "list", "watch"}},
	}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err = client.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "web-trust-sources"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "web-trust-sources"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "web", Namespace: namespace}}}, metav1.CreateOptions{})
	return err
}
