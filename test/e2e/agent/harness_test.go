package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

// agentProc is one trustsync-agent process and the directories of its node: its data
// directory (where it mounts its tmpfs), its socket, and the pods' directories where
// the kubelet would put the targets.
type agentProc struct {
	root, socket, dataDir, podsDir, kubeconfig string
	bin                                        string
	// health is the address of /healthz, /readyz and /metrics.
	health   string
	starts   int
	proc     *controlplane.Process
	conn     *grpc.ClientConn
	node     csi.NodeClient
	identity csi.IdentityClient
	extra    []string
}

// startAgent runs the agent as the chart's ServiceAccount (with the chart's RBAC,
// which setup applied) on node nodeName; it and every mount under its root are gone
// when the test ends.
func startAgent(t testing.TB, cp *controlplane.ControlPlane, extra ...string) *agentProc {
	t.Helper()
	bin, err := controlplane.BuildBinary("agent")
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.MkdirTemp("", "trustsync-agent-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	a := &agentProc{root: root, bin: bin, health: "127.0.0.1:" + strconv.Itoa(port), socket: filepath.Join(root, "csi", "csi.sock"), dataDir: filepath.Join(root, "data"),
		podsDir: filepath.Join(root, "pods"), kubeconfig: filepath.Join(root, "kubeconfig"), extra: extra}
	pod, err := kube(t, cp).CoreV1().Pods(agentNamespace).Get(context.Background(), agentPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := cp.PodServiceAccountConfig(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := controlplane.WriteKubeconfig(a.kubeconfig, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.stop()
		if t.Failed() && a.proc != nil {
			t.Logf("agent log:\n%s", a.proc.Tail())
		}
		for _, err := range cluster.UnmountUnder(root) {
			t.Error(err)
		}
		_ = os.RemoveAll(root)
	})
	a.start(t)
	return a
}

// start starts the agent process (again) and waits until its CSI socket answers ready.
func (a *agentProc) start(t testing.TB) {
	t.Helper()
	a.starts++
	args := append([]string{"--node-name=" + nodeName, "--endpoint=unix://" + a.socket, "--registration-dir=", "--data-dir=" + a.dataDir,
		"--kubeconfig=" + a.kubeconfig, "--health-bind-address=" + a.health, "--first-sync-timeout=5s", "--reap-interval=1s", "--pods-dir=" + a.podsDir, "-v=2"}, a.extra...)
	var err error
	if a.proc, err = controlplane.StartProcess("trustsync-agent", a.bin, args, filepath.Join(a.root, "agent-"+strconv.Itoa(a.starts)+".log")); err != nil {
		t.Fatal(err)
	}
	if a.conn, err = grpc.NewClient("unix://"+a.socket, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	a.node, a.identity = csi.NewNodeClient(a.conn), csi.NewIdentityClient(a.conn)
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if a.proc.Exited() {
			return false, fmt.Errorf("the agent exited:\n%s", a.proc.Tail())
		}
		resp, err := a.identity.Probe(ctx, &csi.ProbeRequest{})
		return err == nil && resp.GetReady().GetValue(), nil
	})
	if err != nil {
		t.Fatalf("the agent did not become ready: %v\n%s", err, a.proc.Tail())
	}
}

// metric returns the value of the agent's metric line that starts with series.
func (a *agentProc) metric(t testing.TB, series string) string {
	t.Helper()
	resp, err := http.Get("http://" + a.health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return rest
		}
	}
	return ""
}

// stop stops the agent gracefully; kill stops it with SIGKILL.
func (a *agentProc) stop() {
	if a.conn != nil {
		_ = a.conn.Close()
	}
	if a.proc != nil {
		a.proc.Stop(5 * time.Second)
	}
}

func (a *agentProc) kill() {
	_ = a.conn.Close()
	a.proc.Kill()
}

// target is where the kubelet would publish pod's trustsync volume.
func (a *agentProc) target(pod *corev1.Pod) string {
	return filepath.Join(a.podsDir, string(pod.UID), "volumes", "kubernetes.io~csi", csiVolume(pod).Name, "mount")
}

// volumeID is the pod's volume's ID, made as the kubelet makes one for an inline
// volume: unique per pod and volume.
func volumeID(pod *corev1.Pod) string {
	sum := sha256.Sum256([]byte(string(pod.UID) + "/" + csiVolume(pod).Name))
	return "csi-" + hex.EncodeToString(sum[:])
}

func csiVolume(pod *corev1.Pod) corev1.Volume {
	for _, v := range pod.Spec.Volumes {
		if v.CSI != nil && v.CSI.Driver == contract.CSIDriverName {
			return v
		}
	}
	panic("pod " + pod.Name + " has no " + contract.CSIDriverName + " volume")
}

// publish asks the agent to publish pod's volume as the kubelet would, with the pod's
// identity and a token bound to it; edit, when set, changes the attributes first.
func (a *agentProc) publish(t testing.TB, cp *controlplane.ControlPlane, pod *corev1.Pod, edit func(attrs map[string]string)) error {
	t.Helper()
	target := a.target(pod)
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		t.Fatal(err)
	}
	attrs := maps.Clone(csiVolume(pod).CSI.VolumeAttributes)
	attrs["csi.storage.k8s.io/pod.name"] = pod.Name
	attrs["csi.storage.k8s.io/pod.namespace"] = pod.Namespace
	attrs["csi.storage.k8s.io/pod.uid"] = string(pod.UID)
	attrs["csi.storage.k8s.io/serviceAccount.name"] = pod.Spec.ServiceAccountName
	attrs["csi.storage.k8s.io/ephemeral"] = "true"
	attrs["csi.storage.k8s.io/serviceAccount.tokens"] = podTokens(t, cp, pod, "")
	if edit != nil {
		edit(attrs)
	}
	// As the kubelet passes them with the chart's serviceAccountTokenInSecrets.
	secrets := map[string]string{}
	if tokens, ok := attrs["csi.storage.k8s.io/serviceAccount.tokens"]; ok {
		secrets["csi.storage.k8s.io/serviceAccount.tokens"] = tokens
		delete(attrs, "csi.storage.k8s.io/serviceAccount.tokens")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := a.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: volumeID(pod), TargetPath: target, Readonly: true, VolumeContext: attrs, Secrets: secrets,
		VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY}},
	})
	return err
}

// unpublish asks the agent to remove pod's volume.
func (a *agentProc) unpublish(t testing.TB, pod *corev1.Pod) {
	t.Helper()
	if _, err := a.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: volumeID(pod), TargetPath: a.target(pod)}); err != nil {
		t.Fatalf("unpublish %s: %v", pod.Name, err)
	}
}

// podTokens is the kubelet's serviceAccount.tokens attribute: a token for audience,
// bound to pod, as tokenRequests asks for.
func podTokens(t testing.TB, cp *controlplane.ControlPlane, pod *corev1.Pod, audience string) string {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: new(int64(3600)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if audience != "" {
		req.Spec.Audiences = []string{audience}
	}
	tr, err := kube(t, cp).CoreV1().ServiceAccounts(pod.Namespace).CreateToken(context.Background(), pod.Spec.ServiceAccountName, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(map[string]any{audience: map[string]any{"token": tr.Status.Token, "expirationTimestamp": tr.Status.ExpirationTimestamp}})
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// newPod creates pod name, as ServiceAccount sa, on node, after the injector turned its
// annotations (with delivery node) into the agent's volume; it runs as uid 1000.
func newPod(t testing.TB, cp *controlplane.ControlPlane, name, sa, node string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	a := map[string]string{v1alpha1.AnnotationInject: "true", injector.AnnotationDelivery: string(v1alpha1.DeliveryNode)}
	maps.Copy(a, annotations)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: a},
		Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: node,
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: new(int64(1000)), RunAsGroup: new(int64(1000))},
			Containers:      []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	res, err := injector.Inject(pod, namespace, nil, injector.Config{NodeAgent: true, Namespace: agentNamespace})
	if err != nil {
		t.Fatalf("the injector refused pod %s: %v", name, err)
	}
	injected, err := res.Apply(pod)
	if err != nil {
		t.Fatal(err)
	}
	created, err := kube(t, cp).CoreV1().Pods(namespace).Create(context.Background(), injected, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube(t, cp).CoreV1().Pods(namespace).Delete(context.Background(), name, *metav1.NewDeleteOptions(0))
	})
	return created
}

func kube(t testing.TB, cp *controlplane.ControlPlane) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// bundles is the native API's store.
func bundles(t testing.TB, cp *controlplane.ControlPlane) *bundleapi.Store {
	t.Helper()
	c, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	return bundleapi.NewStore(c, bundle.NativeV1)
}

// newBundle creates a bundle of a fresh name holding anchors; it is deleted when the
// test ends.
func newBundle(t testing.TB, cp *controlplane.ControlPlane, anchors ...*fixtures.Cert) string {
	t.Helper()
	name := "agent-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	b := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: fixtures.Bundle(anchors...)}}
	if _, err := bundles(t, cp).Create(context.Background(), b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bundles(t, cp).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// setBundle replaces the anchors of bundle name.
func setBundle(t testing.TB, cp *controlplane.ControlPlane, name string, anchors ...*fixtures.Cert) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		b, err := bundles(t, cp).Get(ctx, name)
		if err != nil {
			return false, err
		}
		b.Spec.TrustBundle = fixtures.Bundle(anchors...)
		_, err = bundles(t, cp).Update(ctx, b, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// merged is the exact file the pipeline writes for these anchors.
func merged(anchors ...*fixtures.Cert) []byte {
	p := bundle.NewPool()
	for _, a := range anchors {
		p.AddDER(a.Cert.Raw)
	}
	return p.PEM()
}

// waitFile waits until path holds want.
func waitFile(t testing.TB, path string, want []byte) {
	t.Helper()
	var got []byte
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got, _ = os.ReadFile(path)
		return string(got) == string(want), nil
	})
	if err != nil {
		t.Fatalf("%s holds\n%s\nwant\n%s", path, got, want)
	}
}

// volumeDirs lists the volumes the agent keeps in its data directory.
func (a *agentProc) volumeDirs(t testing.TB) []string {
	t.Helper()
	entries, err := os.ReadDir(a.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// isMountPoint reports whether path is mounted.
func isMountPoint(path string) bool { return slices.Contains(cluster.MountsUnder(path), path) }
