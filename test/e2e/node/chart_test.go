package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/test/cluster"
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
