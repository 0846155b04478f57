package node

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/doccmd"
	"github.com/trustsync/trustsync/test/poll"
)

// README's install (the image built and imported, `helm install` with the chart's
// defaults): the webhook's replicas and the signer become Ready by their own probes,
// the self-managed TLS is set up, and the API server reaches the webhook through its
// Service (an annotated pod comes back injected).
func TestChart_InstallWithDefaultsBecomesReadyAndServesThroughItsService(t *testing.T) {
	n := installChart(t)
	t.Logf("README's install (make image to helm install --wait) took %.1fs", installTook.Seconds())
	ctx := context.Background()
	for _, name := range []string{"trustsync-webhook", "trustsync-signer"} {
		d, err := n.Client.AppsV1().Deployments(releaseNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Status.ReadyReplicas != *d.Spec.Replicas {
			t.Errorf("Deployment %s: %d of %d replicas ready after helm install --wait", name, d.Status.ReadyReplicas, *d.Spec.Replicas)
		}
	}
	secret, err := n.Client.CoreV1().Secrets(releaseNamespace).Get(ctx, "trustsync-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the self-managed TLS Secret: %v", err)
	}
	mwc, err := n.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, release, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range mwc.Webhooks {
		if w.ClientConfig.Service == nil || !strings.Contains(string(w.ClientConfig.CABundle), strings.TrimSpace(string(secret.Data["ca.crt"]))) {
			t.Errorf("webhook %s: not called through its Service with the Secret's CA (service %v)", w.Name, w.ClientConfig.Service)
		}
	}
	ns := n.Namespace(t, "chart-smoke", nil)
	pod := pendingPod("smoke")
	created, err := n.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("annotated pod refused: %v", err)
	}
	if created.Annotations["trustsync.io/status"] == "" {
		t.Fatal("the annotated pod was not injected: the API server did not reach the webhook")
	}
}

// This node's API server limits the critical priority classes as GKE does (the
// ResourceQuota admission's limitedResources): a pod of system-node-critical is
// refused in a namespace without a quota covering that class. README's install still
// ran its agent on the node, under the quota the chart ships in its namespace.
func TestChart_InstallsWhereCriticalPodsNeedAQuotaAsOnGKE(t *testing.T) {
	n := installChart(t)
	ctx := context.Background()
	ns := n.Namespace(t, "critical-pods", nil)
	pod := pendingPod("critical")
	pod.Annotations = nil
	pod.Spec.PriorityClassName = "system-node-critical"
	_, err := n.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "insufficient quota to match these scopes") {
		t.Fatalf("a system-node-critical pod outside any quota: %v; want it refused as GKE refuses it", err)
	}
	ds, err := n.Client.AppsV1().DaemonSets(releaseNamespace).Get(ctx, "trustsync-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Spec.Template.Spec.PriorityClassName != "system-node-critical" || ds.Status.NumberReady != 1 {
		t.Errorf("the agent (priority class %q): %d of 1 pods ready", ds.Spec.Template.Spec.PriorityClassName, ds.Status.NumberReady)
	}
	if _, err := n.Client.CoreV1().ResourceQuotas(releaseNamespace).Get(ctx, "trustsync-agent-critical-pods", metav1.GetOptions{}); err != nil {
		t.Errorf("the chart's quota for the agent's class: %v", err)
	}
}

// kubectl trustsync check says every part serves, as README's install ran it; helm
// test runs it in the cluster, from the release's image, and passes. With the webhook
// down, check says so (exit 3, the webhook's row); back up, check --wait sees it come.
func TestChart_CheckAndHelmTestSayEveryPartServes(t *testing.T) {
	n := installChart(t)
	ctx := context.Background()
	out, err := n.Run(ctx, "kubectl", "trustsync", "check", "--wait", "2m")
	if err != nil {
		t.Fatalf("kubectl trustsync check: %v\n%s", err, out)
	}
	for _, part := range []string{"CRDs", "webhook", "signer", "bundles", "controller", "agents"} {
		if !regexp.MustCompile(`(?m)^` + part + ` +yes `).MatchString(out) {
			t.Errorf("check does not say %s is ready:\n%s", part, out)
		}
	}
	out, err = n.Run(ctx, "helm", "test", release, "-n", releaseNamespace, "--timeout", "3m")
	if err != nil || !strings.Contains(out, "Phase:          Succeeded") {
		t.Fatalf("helm test: %v\n%s", err, out)
	}

	if _, err := n.Run(ctx, "kubectl", "-n", releaseNamespace, "scale", "deployment", "trustsync-webhook", "--replicas=0"); err != nil {
		t.Fatal(err)
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			_, _ = n.Run(context.Background(), "kubectl", "-n", releaseNamespace, "scale", "deployment", "trustsync-webhook", "--replicas=2")
		}
	})
	poll.True(t, time.Minute, "check saying the webhook is down", func() bool {
		out, err = n.Run(ctx, "kubectl", "trustsync", "check")
		return err != nil && strings.Contains(err.Error(), "exit status 3") && regexp.MustCompile(`(?m)^webhook +no `).MatchString(out)
	})
	if _, err := n.Run(ctx, "kubectl", "-n", releaseNamespace, "scale", "deployment", "trustsync-webhook", "--replicas=2"); err != nil {
		t.Fatal(err)
	}
	restored = true
	if out, err := n.Run(ctx, "kubectl", "trustsync", "check", "--wait", "3m"); err != nil {
		t.Fatalf("check --wait after the webhook came back: %v\n%s", err, out)
	}
}

// README's first pod, command by command as written: it starts with its trust file and
// its certificate and key, and kubectl trustsync status says its file is up to date
// (once its node's agent has reported it: the command is asked again for 30 s).
func TestReadme_TheFirstPodGetsItsTrustAndCertificate(t *testing.T) {
	n := installChart(t)
	commands, err := doccmd.Block(filepath.Join(n.Root, "README.md"), "## A first pod")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = n.Run(context.Background(), "kubectl", "delete", "-f", "docs/examples/first-pod.yaml", "--wait=false")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, c := range commands {
		if strings.HasPrefix(c, "kubectl trustsync status") {
			var out string
			poll.True(t, 30*time.Second, "status saying the first pod's file is up to date", func() bool {
				out, err = n.Shell(ctx, c)
				return err == nil && regexp.MustCompile(`first-pod .*UpToDate`).MatchString(out)
			})
			continue
		}
		out, err := n.Shell(ctx, c)
		if err != nil {
			t.Fatalf("README's %q: %v", c, err)
		}
		if strings.HasPrefix(c, "kubectl exec") {
			for _, f := range []string{"ca_certificates.pem", "tls.crt", "tls.key"} {
				if !strings.Contains(out, f) {
					t.Errorf("the first pod's app lists %q, without %s", out, f)
				}
			}
		}
	}
}

// pendingPod asks for trust but can never be scheduled (no node matches), so creating
// many costs the node nothing: admission is all that is exercised.
func pendingPod(name string) *corev1.Pod {
	p := appPod(name, map[string]string{"trustsync.io/inject": "true", "trustsync.io/signer-name": "trustsync.io/workload"}, 1000, "true")
	p.GenerateName, p.Name = name+"-", ""
	p.Spec.NodeSelector = map[string]string{"trustsync.test/never": "true"}
	return p
}

// createPodsUntil creates pending annotated pods in a loop until stop is closed and
// returns how many were created and every failure; count, when given, is kept
// current meanwhile, for a caller to wait on.
func createPodsUntil(n *cluster.Node, namespace string, stop <-chan struct{}, counts ...*atomic.Int64) (created int64, failures []string) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	count := &atomic.Int64{}
	if len(counts) > 0 {
		count = counts[0]
	}
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				p, err := n.Client.CoreV1().Pods(namespace).Create(ctx, pendingPod("loop"), metav1.CreateOptions{})
				cancel()
				switch {
				case err != nil:
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
				case p.Annotations["trustsync.io/status"] == "":
					mu.Lock()
					failures = append(failures, fmt.Sprintf("pod %s admitted without injection", p.Name))
					mu.Unlock()
				default:
					count.Add(1)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return count.Load(), failures
}

// The webhook Deployment is rolled while pods are created in a loop: zero creations
// fail, because each replica keeps serving until the API server stops sending to it.
func TestWebhook_RolloutWhilePodsAreCreatedFailsNoCreation(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "rollout", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	type result struct {
		created  int64
		failures []string
	}
	done := make(chan result)
	var created atomic.Int64
	go func() {
		c, f := createPodsUntil(n, ns, stop, &created)
		done <- result{c, f}
	}()
	poll.True(t, time.Minute, "pods being created before the rollout", func() bool { return created.Load() >= 3 })
	start := time.Now()
	_, err := n.Run(ctx, "kubectl", "-n", releaseNamespace, "rollout", "restart", "deployment/trustsync-webhook")
	if err == nil {
		_, err = n.Run(ctx, "kubectl", "-n", releaseNamespace, "rollout", "status", "deployment/trustsync-webhook", "--timeout=3m")
	}
	if err == nil {
		// Creations go on against the new replicas, too.
		rolled := created.Load()
		poll.True(t, time.Minute, "pods created after the rollout", func() bool { return created.Load() >= rolled+3 })
	}
	close(stop)
	r := <-done
	if err != nil {
		t.Fatalf("rollout: %v", err)
	}
	t.Logf("rollout took %.1fs; %d pods created meanwhile", time.Since(start).Seconds(), r.created)
	if len(r.failures) > 0 {
		t.Fatalf("%d of %d pod creations failed during the rollout; first: %s", len(r.failures), int64(len(r.failures))+r.created, r.failures[0])
	}
	if r.created < 20 {
		t.Fatalf("only %d pods were created during the rollout; the test proves nothing", r.created)
	}
}
