package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Node is a cluster started through hack/cluster.sh for one e2e package.
type Node struct {
	Dir    string
	Root   string
	Config *rest.Config
	Client *kubernetes.Clientset
}

// StartNode runs `hack/cluster.sh up` in a new directory, as a user would. A failure
// carries the script's output, which ends with the failing component's log tail.
func StartNode() (*Node, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", nodeDirPrefix)
	if err != nil {
		return nil, err
	}
	n := &Node{Dir: dir, Root: root}
	out, err := exec.Command(filepath.Join(root, "hack", "cluster.sh"), "up", dir).CombinedOutput()
	if err != nil {
		return n, fmt.Errorf("hack/cluster.sh up %s failed: %w\n%s", dir, err, lastBytes(out, 6000))
	}
	if n.Config, err = clientcmd.BuildConfigFromFlags("", n.Kubeconfig()); err != nil {
		return n, err
	}
	n.Config.QPS, n.Config.Burst = 50, 100
	n.Client, err = kubernetes.NewForConfig(n.Config)
	return n, err
}

// Stop runs `hack/cluster.sh down` and removes the directory unless
// TRUSTSYNC_KEEP_NODE is set (to read the logs after a failure).
func (n *Node) Stop() error {
	out, err := exec.Command(filepath.Join(n.Root, "hack", "cluster.sh"), "down", n.Dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("hack/cluster.sh down: %w\n%s", err, out)
	}
	if os.Getenv("TRUSTSYNC_KEEP_NODE") == "" {
		return os.RemoveAll(n.Dir)
	}
	return nil
}

// Crash kills components with SIGKILL, as an OOM kill or a power cut would.
func (n *Node) Crash(names ...string) {
	for _, name := range names {
		if pid, ok := readPid(n.Dir, name); ok {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			waitGone([]int{pid}, 5*time.Second)
		}
	}
}

// ChartValues are the values the chart needs on this node beyond its defaults, as
// docs/install.md asks of any cluster whose kubelet does not keep its files in
// /var/lib/kubelet: this kubelet runs with --root-dir in the node's directory, where
// the agent also keeps its volumes.
func (n *Node) ChartValues() []string {
	return []string{"--set", "agent.kubeletDir=" + filepath.Join(n.Dir, "kubelet"), "--set", "agent.dataDir=" + filepath.Join(n.Dir, "trustsync-agent")}
}

// EtcdURLFile is where, in the node's directory, etcd's client URL is written.
const EtcdURLFile = "run/etcd-url"

// EtcdURL is the node's etcd's client URL.
func (n *Node) EtcdURL() (string, error) {
	url, err := os.ReadFile(filepath.Join(n.Dir, EtcdURLFile))
	return string(url), err
}

// Kubeconfig is the cluster-admin kubeconfig.
func (n *Node) Kubeconfig() string { return filepath.Join(n.Dir, "kubeconfig") }

// Run runs one of bin/'s tools (kubectl, helm, ctr) against the node. bin/ is on the
// tool's PATH, so kubectl finds its plugins there as a user's would on theirs
// (`kubectl trustsync ...`).
func (n *Node) Run(ctx context.Context, tool string, args ...string) (string, error) {
	switch {
	case tool == "kubectl" && len(args) > 0 && args[0] == "trustsync":
		// kubectl takes no flags before a plugin's name.
		args = append(args, "--kubeconfig", n.Kubeconfig())
	case tool == "kubectl", tool == "helm":
		args = append([]string{"--kubeconfig", n.Kubeconfig()}, args...)
	case tool == "ctr":
		args = append([]string{"--address", filepath.Join(n.Dir, "containerd", "containerd.sock"), "-n", "k8s.io"}, args...)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(n.Root, "bin", tool), args...)
	return n.run(cmd, tool+" "+strings.Join(args, " "))
}

// Shell runs one command line as the docs teach it, with bash, from the checkout: as
// a user of this node would, with the node's kubeconfig and containerd socket in the
// environment (KUBECONFIG, CONTAINERD_ADDRESS) and bin/ first on the PATH.
func (n *Node) Shell(ctx context.Context, line string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", line)
	cmd.Env = []string{"KUBECONFIG=" + n.Kubeconfig(), "CONTAINERD_ADDRESS=" + filepath.Join(n.Dir, "containerd", "containerd.sock")}
	return n.run(cmd, line)
}

func (n *Node) run(cmd *exec.Cmd, what string) (string, error) {
	cmd.Dir = n.Root
	cmd.Env = append(append(os.Environ(), cmd.Env...), "PATH="+filepath.Join(n.Root, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECACHEDIR="+filepath.Join(n.Dir, "kubectl-cache"), "HELM_CACHE_HOME="+filepath.Join(n.Dir, "helm-cache"),
		"HELM_CONFIG_HOME="+filepath.Join(n.Dir, "helm-config"), "HELM_DATA_HOME="+filepath.Join(n.Dir, "helm-data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("%s: %w: %s", what, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Exec runs command in a pod's container, as that container's user.
func (n *Node) Exec(ctx context.Context, namespace, pod, container string, command ...string) (string, error) {
	return n.Run(ctx, "kubectl", append([]string{"exec", "-n", namespace, pod, "-c", container, "--"}, command...)...)
}

// Logs returns a container's log.
func (n *Node) Logs(ctx context.Context, namespace, pod, container string) (string, error) {
	return n.Run(ctx, "kubectl", "logs", "-n", namespace, pod, "-c", container)
}

// Namespace creates a namespace with labels for one test, deleted when it ends, and
// waits for its default ServiceAccount (kube-controller-manager's work).
func (n *Node) Namespace(t testing.TB, name string, labels map[string]string) string {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := n.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = n.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := n.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("namespace %s has no default ServiceAccount after 30s", name)
	}
	return name
}

// WaitPod waits until cond holds for the pod, failing with its status and events.
func (n *Node) WaitPod(t testing.TB, namespace, name string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := n.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not %s after %s: %s", namespace, name, what, timeout, n.describe(namespace, name, last))
	}
	return last
}

// PodReady reports whether every container of the pod is ready.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (n *Node) describe(namespace, name string, p *corev1.Pod) string {
	var b strings.Builder
	if p != nil {
		fmt.Fprintf(&b, "phase %s", p.Status.Phase)
		for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			fmt.Fprintf(&b, "; %s ready=%v restarts=%d state=%+v", s.Name, s.Ready, s.RestartCount, s.State)
		}
	}
	events, err := n.Client.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err == nil {
		for _, e := range events.Items {
			fmt.Fprintf(&b, "\n  event %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
	return b.String()
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "cluster.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find hack/cluster.sh above the working directory")
		}
		dir = parent
	}
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// RestartKubelet stops the node's kubelet and starts it again with the same
// configuration, as a kubelet upgrade or crash would, and waits until the node is
// Ready: pods keep running meanwhile.
func (n *Node) RestartKubelet() error {
	stop(n.Dir, "kubelet", 15*time.Second)
	c := &node{dir: n.Dir, o: Options{Bin: filepath.Join(n.Root, "bin")}, admin: n.Client}
	if err := c.startKubelet(); err != nil {
		return err
	}
	return c.waitNodeReady()
}
