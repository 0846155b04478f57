// Package upgrade upgrades a live trustsync on the real node from a previous release to
// the working tree, as docs/upgrading.md says: the previous release (the chart and image
// of commit FROM: $TRUSTSYNC_UPGRADE_FROM, else the first commit CHANGELOG.md names) is
// installed with live pods of every delivery and a TrustTarget; the tree is released
// (make release), pushed to a registry (make push), and the release upgraded to it from
// oci://, its image pulled by the node's containerd from that registry, while a client
// keeps creating annotated pods. No creation is refused, no running pod restarts, the
// CRDs are the tree's, and a bundle edit after the upgrade reaches every pod.
package upgrade

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/doccmd"
	"github.com/trustsync/trustsync/test/fixtures"
)

var root, _ = filepath.Abs("../../..")

const (
	releaseName = "trustsync"
	releaseNS   = "trustsync-system"
	appsNS      = "upgrade-apps"
	bundleName  = "upgrade-corp"
)

// from is the commit the previous release is built from, in full.
func from(t *testing.T) string {
	t.Helper()
	if c := os.Getenv("TRUSTSYNC_UPGRADE_FROM"); c != "" {
		full, err := resolveCommit(c)
		if err != nil {
			t.Fatal(err)
		}
		return full
	}
	data, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`commit\s+([0-9a-f]{40})`).FindSubmatch(data)
	if m == nil {
		t.Fatal("CHANGELOG.md names no commit to upgrade from (`commit <40 hex digits>`), and TRUSTSYNC_UPGRADE_FROM is not set")
	}
	return string(m[1])
}

// resolveCommit turns what make test-upgrade FROM= was given (a short commit, a tag, a
// branch) into the full commit, or says why it cannot.
func resolveCommit(c string) (string, error) {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "--quiet", c+"^{commit}").Output()
	full := strings.TrimSpace(string(out))
	if err != nil || len(full) != 40 {
		return "", fmt.Errorf("FROM=%s (TRUSTSYNC_UPGRADE_FROM) is not a commit of this repository; give a commit, tag or branch git knows (git log --oneline)", c)
	}
	return full, nil
}

// run runs a command in dir, failing the test with its output.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// previous builds commit's chart and image with that commit's own tooling, imports the
// image into the node's containerd as trustsync.test/previous, and returns the chart.
func previous(t *testing.T, n *cluster.Node, commit string) (chart, version string) {
	t.Helper()
	src := t.TempDir()
	run(t, root, nil, "sh", "-c", fmt.Sprintf("git archive %s | tar -x -C %q", commit, src))
	run(t, src, nil, "make", "-s", "build")
	version = "0.1.0"
	if v, err := os.ReadFile(filepath.Join(src, "VERSION")); err == nil {
		version = strings.TrimSpace(string(v))
	}
	tar := filepath.Join(t.TempDir(), "previous.tar")
	run(t, filepath.Join(src, "hack", "tools", "image"), nil, "go", "run", ".", "trustsync", "--bin", filepath.Join(src, "bin"),
		"--ref", "trustsync.test/previous:v"+version, "--out", tar)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := n.Run(ctx, "ctr", "images", "import", tar); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(src, "charts", "trustsync"), version
}

// startRegistry serves a registry over TLS on the node's loopback and tells the node's
// containerd to trust its CA; it returns host:port and the CA's file.
func startRegistry(t *testing.T, n *cluster.Node) (string, string) {
	t.Helper()
	reg := controlplane.StartRegistry(t)
	host, caFile := reg.Host, reg.CAFile
	hosts := filepath.Join(cluster.RegistryHostsDir(n.Dir), host)
	if err := os.MkdirAll(hosts, 0o755); err != nil {
		t.Fatal(err)
	}
	toml := fmt.Sprintf("server = \"https://%s\"\n\n[host.\"https://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %q\n", host, host, caFile)
	if err := os.WriteFile(filepath.Join(hosts, "hosts.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	return host, caFile
}

func appPod(name string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "app", Image: cluster.ShellImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "36000"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
}

// live are the pods that must live through the upgrade, by delivery, with where each
// reads its trust file.
var live = []struct {
	name, delivery, file string
}{
	{"sidecar-app", "sidecar", "/var/run/trust-anchors/ca.pem"},
	{"node-app", "node", "/var/run/trust-anchors/ca.pem"},
	{"native-app", "native", "/var/run/trust-anchors/ca.pem"},
}

func TestUpgrade_FromThePreviousReleaseWithLivePodsOfEveryDelivery(t *testing.T) {
	commit := from(t)
	n, err := cluster.StartNode()
	if n != nil {
		defer func() {
			if err := n.Stop(); err != nil {
				t.Error(err)
			}
		}()
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// The next release first: made and pushed before anything runs, so that the
	// upgrade itself is all that happens while pods are being created.
	host, caFile := startRegistry(t, n)
	dist := t.TempDir()
	helmEnv := []string{"SSL_CERT_FILE=" + caFile, "HELM_REGISTRY_CONFIG=" + filepath.Join(n.Dir, "helm-registry.json")}
	run(t, root, append([]string{"DIST=" + dist}, helmEnv...), filepath.Join(root, "hack", "release.sh"))
	run(t, root, append([]string{"DIST=" + dist}, helmEnv...), filepath.Join(root, "hack", "push.sh"), host+"/trustsync")
	nextVersion := strings.TrimSpace(run(t, root, nil, "cat", "VERSION"))

	// The previous release, installed as its own docs said, with live pods.
	chart, prevVersion := previous(t, n, commit)
	t.Logf("upgrading from %s (version %s) to the tree (version %s)", commit[:12], prevVersion, nextVersion)
	helm := func(args ...string) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 6*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(c, filepath.Join(root, "bin", "helm"), append(append([]string{"--kubeconfig", n.Kubeconfig()}, args...), n.ChartValues()...)...)
		cmd.Env = append(os.Environ(), helmEnv...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// The node's API server limits the critical priority classes as GKE's does, and
	// the previous chart ships no quota for its agent's class: its users there made one,
	// as this does. The new chart brings its own.
	if _, err := n.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := n.Client.CoreV1().ResourceQuotas(releaseNS).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "critical-pods"},
		Spec: corev1.ResourceQuotaSpec{
			Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("100")},
			ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
				ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"system-node-critical"},
			}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	helm("install", releaseName, chart, "-n", releaseNS, "--create-namespace", "--set", "image.repository=trustsync.test/previous", "--wait", "--timeout", "4m")

	ca1, ca2 := fixtures.CA("upgrade CA one"), fixtures.CA("upgrade CA two")
	bundles := n.Client.CertificatesV1().ClusterTrustBundles()
	if _, err := bundles.Create(ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: bundleName},
		Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: fixtures.Bundle(ca1)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.Namespace(t, appsNS, nil)
	n.Namespace(t, "upgrade-loop", nil)
	for _, p := range live {
		pod := appPod(p.name, map[string]string{"trustsync.io/inject": "true", "trustsync.io/delivery": p.delivery,
			"trustsync.io/bundle-name": bundleName, "trustsync.io/path": "ca.pem"})
		if _, err := n.Client.CoreV1().Pods(appsNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("pod %s (delivery %s) under the previous release: %v", p.name, p.delivery, err)
		}
	}
	dyn := dynamic.NewForConfigOrDie(n.Config)
	targets := dyn.Resource(schema.GroupVersionResource{Group: "trustsync.io", Version: "v1alpha1", Resource: "trusttargets"})
	target := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trustsync.io/v1alpha1", "kind": "TrustTarget", "metadata": map[string]any{"name": "upgrade"},
		"spec": map[string]any{
			"sources": []any{map[string]any{"name": bundleName, "path": "ca.crt"}},
			"target": map[string]any{"configMap": map[string]any{"name": "upgrade-trust"},
				"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": appsNS}}},
		},
	}}
	if _, err := targets.Create(ctx, target, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := map[string]*corev1.Pod{}
	for _, p := range live {
		before[p.name] = n.WaitPod(t, appsNS, p.name, 3*time.Minute, "Ready", cluster.PodReady)
	}
	waitHolding(t, n, []string{bundle.AnchorID(ca1.Cert.Raw)}, 3*time.Minute)

	// Pods are created throughout the upgrade: none may be refused.
	stop := make(chan struct{})
	var created atomic.Int64
	var refusals []string
	var loop sync.WaitGroup
	loop.Add(1)
	go func() {
		defer loop.Done()
		refusals = createUntil(n, stop, &created)
	}()

	// docs/upgrading.md's commands, as written but for the registry and the version,
	// run from the release (its trustsync-crds.yaml), not from a clone.
	commands, err := doccmd.Block(filepath.Join(root, "docs", "upgrading.md"), "## The upgrade")
	if err != nil {
		t.Fatal(err)
	}
	env := "export " + strings.Join(helmEnv, " ") + "; cd " + dist + " && "
	upgraded := false
	for _, c := range commands {
		c = strings.NewReplacer("REGISTRY", host+"/trustsync", "VERSION", nextVersion).Replace(c)
		if strings.HasPrefix(c, "helm upgrade ") {
			// The same upgrade with --reuse-values, which renders the new chart
			// with the old release's values and none of the new defaults: refused
			// saying what to use, not a nil pointer.
			reuse := strings.Replace(c, "--reset-then-reuse-values", "--reuse-values", 1) + " --dry-run=server"
			out, err := n.Shell(ctx, env+reuse)
			if err == nil {
				t.Logf("helm upgrade --reuse-values from %s renders (the values' shape did not change)", commit[:12])
			} else if !strings.Contains(err.Error(), "Upgrade with --reset-then-reuse-values") {
				t.Errorf("helm upgrade --reuse-values fails without saying what to do: %v\n%s", err, out)
			}
			upgraded = true
		}
		c2, cancel := context.WithTimeout(ctx, 6*time.Minute)
		_, err := n.Shell(c2, env+c)
		cancel()
		if err != nil {
			t.Fatalf("docs/upgrading.md: %v", err)
		}
	}
	if !upgraded {
		t.Fatalf("docs/upgrading.md's upgrade %q runs no helm upgrade", commands)
	}
	close(stop)
	loop.Wait()
	t.Logf("%d annotated pods created during the upgrade, %d refused", created.Load(), len(refusals))
	if len(refusals) > 0 || created.Load() < 10 {
		t.Errorf("%d pods created during the upgrade, %d refused: %q", created.Load(), len(refusals), first(refusals, 5))
	}

	// Every workload runs the next release's image, pulled from the registry.
	pods, err := n.Client.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		if img := p.Spec.Containers[0].Image; img != host+"/trustsync/trustsync:v"+nextVersion {
			t.Errorf("pod %s runs %s after the upgrade, want the pushed %s/trustsync/trustsync:v%s", p.Name, img, host, nextVersion)
		}
	}
	images, err := n.Run(ctx, "ctr", "images", "ls", "-q")
	if err != nil || !strings.Contains(images, host+"/trustsync/trustsync:v"+nextVersion) {
		t.Errorf("containerd holds no %s/trustsync/trustsync:v%s (pulled from the registry): %v\n%s", host, nextVersion, err, images)
	}

	// No running pod was restarted or replaced.
	for _, p := range live {
		now, err := n.Client.CoreV1().Pods(appsNS).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s is gone after the upgrade: %v", p.name, err)
		}
		if now.UID != before[p.name].UID || restarts(now) != restarts(before[p.name]) {
			t.Errorf("pod %s (delivery %s) was replaced or restarted by the upgrade: restarts %d, was %d", p.name, p.delivery, restarts(now), restarts(before[p.name]))
		}
	}

	// The CRDs are the tree's.
	checkCRDs(t, n)

	// An edit after the upgrade reaches every pod, whatever delivers it, and the
	// TrustTarget's ConfigMap (the native projection within the kubelet's minute or so).
	b, err := bundles.Get(ctx, bundleName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Spec.TrustBundle = fixtures.Bundle(ca1, ca2)
	if _, err := bundles.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHolding(t, n, []string{bundle.AnchorID(ca1.Cert.Raw), bundle.AnchorID(ca2.Cert.Raw)}, 4*time.Minute)
}

// waitHolding waits until every live pod's file and the TrustTarget's ConfigMap hold
// exactly ids.
func waitHolding(t *testing.T, n *cluster.Node, ids []string, timeout time.Duration) {
	t.Helper()
	want := strings.Join(slices.Sorted(slices.Values(ids)), ",") // as AnchorIDs gives them
	holds := func(text string) bool {
		got, err := bundle.AnchorIDs([]byte(text))
		return err == nil && strings.Join(got, ",") == want
	}
	lagging, pod := "", ""
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		for _, p := range live {
			out, err := n.Exec(ctx, appsNS, p.name, "app", "cat", p.file)
			if err != nil || !holds(out) {
				lagging, pod = p.name+" (delivery "+p.delivery+")", p.name
				return false, nil
			}
		}
		cm, err := n.Client.CoreV1().ConfigMaps(appsNS).Get(ctx, "upgrade-trust", metav1.GetOptions{})
		if err != nil || !holds(cm.Data["ca.crt"]) {
			lagging, pod = "the TrustTarget's ConfigMap", ""
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		why := ""
		if pod != "" {
			ctx := context.Background()
			describe, _ := n.Run(ctx, "kubectl", "describe", "pod", "-n", appsNS, pod)
			logs, _ := n.Run(ctx, "kubectl", "logs", "-n", appsNS, pod, "--all-containers", "--tail", "40")
			why = "\n" + describe + "\n" + logs
		}
		t.Fatalf("%s does not hold %d anchors within %s%s", lagging, len(ids), timeout, why)
	}
}

// createUntil creates annotated pods (never scheduled) until stop closes, and returns
// every refusal.
func createUntil(n *cluster.Node, stop <-chan struct{}, created *atomic.Int64) []string {
	var refusals []string
	for {
		select {
		case <-stop:
			return refusals
		default:
		}
		p := appPod("", map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": bundleName})
		p.GenerateName = "loop-"
		p.Spec.NodeSelector = map[string]string{"trustsync.test/never": "true"}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := n.Client.CoreV1().Pods("upgrade-loop").Create(ctx, p, metav1.CreateOptions{})
		cancel()
		switch {
		case err != nil:
			refusals = append(refusals, err.Error())
		case out.Annotations["trustsync.io/status"] == "":
			refusals = append(refusals, "pod "+out.Name+" admitted without injection")
		default:
			created.Add(1)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		n += s.RestartCount
	}
	return n
}

func first(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// checkCRDs compares each CRD the API server serves with the tree's file: the same
// schema of every version.
func checkCRDs(t *testing.T, n *cluster.Node) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "charts", "trustsync", "files", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRD files: %v", err)
	}
	dyn := dynamic.NewForConfigOrDie(n.Config)
	crds := dyn.Resource(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var want apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		u, err := crds.Get(context.Background(), want.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("CRD %s: %v", want.Name, err)
		}
		// The release owns it now (the chart's templates install and upgrade the
		// CRDs), and keeps it when uninstalled.
		if a := u.GetAnnotations(); a["meta.helm.sh/release-name"] != releaseName || a["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s after the upgrade: release %q, resource policy %q; want release %s's, kept", want.Name, a["meta.helm.sh/release-name"], a["helm.sh/resource-policy"], releaseName)
		}
		var got apiextensionsv1.CustomResourceDefinition
		raw, _ := json.Marshal(u.Object)
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		for i, v := range want.Spec.Versions {
			if i >= len(got.Spec.Versions) {
				t.Errorf("CRD %s serves no version %s after the upgrade", want.Name, v.Name)
				continue
			}
			a, _ := json.Marshal(v.Schema)
			b, _ := json.Marshal(got.Spec.Versions[i].Schema)
			if !bytes.Equal(a, b) {
				t.Errorf("CRD %s version %s: the served schema is not the tree's after the upgrade", want.Name, v.Name)
			}
		}
	}
}
