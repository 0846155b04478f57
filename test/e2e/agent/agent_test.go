package agent

import (
	"context"

	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"software.sslmate.com/src/go-pkcs12"

	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

// sourcesFor is a sources annotation: the bundle and ConfigMap extra-cas merged into
// ca.pem, and the bundle as a PKCS#12 store with the password in Secret store-pass.
func sourcesFor(bundleName string) string {
	return fmt.Sprintf(`[{"name": %[1]q, "path": "ca.pem"}, {"configMap": {"name": "extra-cas", "key": "ca.crt"}, "path": "ca.pem"},
		{"name": %[1]q, "path": "truststore.p12", "format": "pkcs12", "passwordSecret": {"name": "store-pass", "key": "password"}}]`, bundleName)
}

// webSources creates ConfigMap extra-cas holding extra and Secret store-pass holding
// password, which ServiceAccount web may read; both go when the test ends.
func webSources(t *testing.T, cp *controlplane.ControlPlane, extra *fixtures.Cert, password string) {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "extra-cas"}, Data: map[string]string{"ca.crt": fixtures.Bundle(extra)}}
	if _, err := kube(t, cp).CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "store-pass"}, StringData: map[string]string{"password": password}}
	if _, err := kube(t, cp).CoreV1().Secrets(namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube(t, cp).CoreV1().ConfigMaps(namespace).Delete(context.Background(), "extra-cas", metav1.DeleteOptions{})
		_ = kube(t, cp).CoreV1().Secrets(namespace).Delete(context.Background(), "store-pass", metav1.DeleteOptions{})
	})
}

// A pod with delivery node gets, through the agent, what the sidecar would write: the
// bundle and its ConfigMap merged, the bundle as a PKCS#12 store with the password
// from its Secret (both read with the pod's own token), owned by the app's uid; an
// edit reaches the file; unpublishing leaves nothing.
func TestAgent_DeliversThePodsSourcesAndKeepsThemCurrent(t *testing.T) {
	cp := planes.Get(t, true)
	v1, v2, extra := fixtures.CA("agent v1"), fixtures.CA("agent v2"), fixtures.CA("agent extra")
	name := newBundle(t, cp, v1)
	webSources(t, cp, extra, "s3cret")
	a := startAgent(t, cp)
	pod := newPod(t, cp, "web-1", "web", nodeName, map[string]string{injector.AnnotationSources: sourcesFor(name)})

	if err := a.publish(t, cp, pod, nil); err != nil {
		t.Fatalf("publish: %v", err)
	}
	target := a.target(pod)
	// Publish returned: every required file is there, complete, for the app's first read.
	if got, err := os.ReadFile(filepath.Join(target, "ca.pem")); err != nil || string(got) != string(merged(v1, extra)) {
		t.Fatalf("ca.pem right after publish = %q, %v; want the bundle and the ConfigMap merged", got, err)
	}
	store, err := os.ReadFile(filepath.Join(target, "truststore.p12"))
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pkcs12.DecodeTrustStore(store, "s3cret")
	if err != nil || len(certs) != 1 || !certs[0].Equal(v1.Cert) {
		t.Fatalf("truststore.p12 with the Secret's password: %v, %v; want the bundle's anchor", certs, err)
	}
	for _, f := range []string{"ca.pem", "truststore.p12"} {
		info, err := os.Stat(filepath.Join(target, f))
		if err != nil {
			t.Fatal(err)
		}
		if st := info.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("%s is owned by %d:%d, want the app's 1000:1000", f, st.Uid, st.Gid)
		}
	}
	if !isMountPoint(target) {
		t.Error("the target is not a mount point")
	}
	if err := os.WriteFile(filepath.Join(target, "x"), nil, 0o644); err == nil {
		t.Error("the pod could write into its trust volume; it must be read-only")
	}

	setBundle(t, cp, name, v2)
	waitFile(t, filepath.Join(target, "ca.pem"), merged(v2, extra))

	a.unpublish(t, pod)
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("the target is still there after unpublish: %v", err)
	}
	if dirs := a.volumeDirs(t); len(dirs) != 0 {
		t.Errorf("the agent still keeps %v after unpublish", dirs)
	}
}

// Each bad publish request is refused with a message that says what is wrong, and
// touches nothing else: a volume published before keeps its files and stays current,
// and the refused volume leaves nothing behind.
func TestAgent_RefusesBadRequestsAndLeavesOtherVolumesAlone(t *testing.T) {
	cp := planes.Get(t, true)
	v1, v2 := fixtures.CA("good v1"), fixtures.CA("good v2")
	name := newBundle(t, cp, v1)
	webSources(t, cp, fixtures.CA("extra"), "s3cret")
	a := startAgent(t, cp)
	good := newPod(t, cp, "good", "web", nodeName, map[string]string{injector.AnnotationBundleName: name})
	if err := a.publish(t, cp, good, nil); err != nil {
		t.Fatal(err)
	}
	bundleOnly := map[string]string{injector.AnnotationBundleName: name}
	tests := []struct {
		name        string
		sa, node    string
		annotations map[string]string
		edit        func(map[string]string)
		code        codes.Code
		wantErr     string
	}{
		{name: "an unknown attribute", sa: "web", node: nodeName, annotations: bundleOnly, edit: func(a map[string]string) { a["bundle"] = name },
			code: codes.InvalidArgument, wantErr: `unknown volume attribute "bundle"`},
		{name: "malformed sources", sa: "web", node: nodeName, annotations: bundleOnly, edit: func(a map[string]string) { a["sources"] = `[{"signer": "x"}]` },
			code: codes.InvalidArgument, wantErr: `json: unknown field "signer"`},
		{name: "a missing required bundle", sa: "web", node: nodeName, annotations: map[string]string{injector.AnnotationBundleName: "does-not-exist"},
			code: codes.Unavailable, wantErr: `"does-not-exist"`},
		{name: "a token without the audience", sa: "web", node: nodeName, annotations: map[string]string{injector.AnnotationSources: sourcesFor(name)},
			edit: func(a map[string]string) {
				a["csi.storage.k8s.io/serviceAccount.tokens"] = strings.Replace(a["csi.storage.k8s.io/serviceAccount.tokens"], `{"":`, `{"someone-else":`, 1)
			},
			code: codes.InvalidArgument, wantErr: `no token for audience ""`},
		{name: "no token at all", sa: "web", node: nodeName, annotations: map[string]string{injector.AnnotationSources: sourcesFor(name)},
			edit: func(a map[string]string) { delete(a, "csi.storage.k8s.io/serviceAccount.tokens") },
			code: codes.InvalidArgument, wantErr: "carries no ServiceAccount token"},
		{name: "a pod on another node", sa: "web", node: "elsewhere", annotations: bundleOnly,
			code: codes.PermissionDenied, wantErr: `is on node "elsewhere", not this node ("node-e2e")`},
		{name: "a pod whose uid is not the request's", sa: "web", node: nodeName, annotations: bundleOnly,
			edit: func(a map[string]string) { a["csi.storage.k8s.io/pod.uid"] = "00000000-0000-0000-0000-000000000000" },
			code: codes.FailedPrecondition, wantErr: "not 00000000-0000-0000-0000-000000000000 as the request says"},
		{name: "a Secret the pod's ServiceAccount may not read", sa: "other", node: nodeName,
			annotations: map[string]string{injector.AnnotationSources: `[{"secret": {"name": "store-pass", "key": "password"}, "path": "p.pem"}]`},
			code:        codes.Unavailable, wantErr: `Secret "store-pass": secrets "store-pass" is forbidden: User "system:serviceaccount:apps:other" cannot list resource "secrets"`},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod(t, cp, fmt.Sprintf("bad-%d", i), tc.sa, tc.node, tc.annotations)
			err := a.publish(t, cp, pod, tc.edit)
			if err == nil || status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.wantErr) {
				t.Fatalf("publish = %v, want %s with %q", err, tc.code, tc.wantErr)
			}
			if isMountPoint(a.target(pod)) {
				t.Error("a refused volume is mounted")
			}
			if dirs := a.volumeDirs(t); len(dirs) != 1 {
				t.Errorf("the agent keeps %d volumes, want the good one alone", len(dirs))
			}
		})
	}
	setBundle(t, cp, name, v2)
	waitFile(t, filepath.Join(a.target(good), "ca_certificates.pem"), merged(v2))
}

// Killed with SIGKILL in a burst of edits, the agent leaves the pods' files as they
// were (the app reading them never sees a partial file); restarted, it adopts every
// live volume and brings it up to date, and removes the volume of a pod deleted
// while it was down.
func TestAgent_RestartAdoptsLiveVolumesAndRemovesTheDeletedPods(t *testing.T) {
	cp := planes.Get(t, true)
	versions := []*fixtures.Cert{fixtures.CA("burst 0"), fixtures.CA("burst 1"), fixtures.CA("burst 2"), fixtures.CA("burst 3"), fixtures.CA("burst 4")}
	name := newBundle(t, cp, versions[0])
	a := startAgent(t, cp)
	var pods []*corev1.Pod
	for i := range 3 {
		pod := newPod(t, cp, fmt.Sprintf("restart-%d", i), "web", nodeName, map[string]string{injector.AnnotationBundleName: name})
		if err := a.publish(t, cp, pod, nil); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, pod)
	}
	// The app of pod 0 reads its file without pause through all of it.
	file := filepath.Join(a.target(pods[0]), "ca_certificates.pem")
	complete := map[string]bool{}
	for _, v := range versions {
		complete[string(merged(v))] = true
	}
	var reads, partial atomic.Int64
	var lastBad atomic.Value
	ctx, stopReading := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			got, err := os.ReadFile(file)
			reads.Add(1)
			if err != nil || !complete[string(got)] {
				partial.Add(1)
				lastBad.Store(fmt.Sprintf("%q, %v", got, err))
			}
		}
	}()

	for _, v := range versions[1:3] {
		setBundle(t, cp, name, v)
		time.Sleep(30 * time.Millisecond)
	}
	a.kill()
	setBundle(t, cp, name, versions[3])
	if err := kube(t, cp).CoreV1().Pods(namespace).Delete(context.Background(), pods[2].Name, *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	setBundle(t, cp, name, versions[4])
	a.start(t)
	for _, pod := range pods[:2] {
		waitFile(t, filepath.Join(a.target(pod), "ca_certificates.pem"), merged(versions[4]))
	}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, statErr := os.Stat(a.target(pods[2]))
		return os.IsNotExist(statErr) && len(a.volumeDirs(t)) == 2, nil
	})
	if err != nil {
		t.Errorf("the deleted pod's volume was not removed: target mounted %v, the agent keeps %d volumes", isMountPoint(a.target(pods[2])), len(a.volumeDirs(t)))
	}
	// Still kept current after adoption.
	setBundle(t, cp, name, versions[0])
	waitFile(t, file, merged(versions[0]))
	stopReading()
	wg.Wait()
	if n := partial.Load(); n > 0 {
		t.Errorf("%d of %d reads saw an incomplete file, the last: %v", n, reads.Load(), lastBad.Load())
	}
	t.Logf("%d reads of pod 0's file, all complete", reads.Load())
}

// The agent keeps the bundle anchors of a node's pods in one set of watches: a second
// pod selecting the same bundle adds no watch at the API server.
func TestAgent_PodsSelectingOneBundleShareItsWatch(t *testing.T) {
	cp := planes.Get(t, true)
	name := newBundle(t, cp, fixtures.CA("shared"))
	a := startAgent(t, cp)
	var pods []*corev1.Pod
	for i := range 20 {
		pods = append(pods, newPod(t, cp, fmt.Sprintf("shared-%d", i), "web", nodeName, map[string]string{injector.AnnotationBundleName: name}))
	}
	if err := a.publish(t, cp, pods[0], nil); err != nil {
		t.Fatal(err)
	}
	before := settledWatches(t, cp)
	for _, pod := range pods[1:] {
		if err := a.publish(t, cp, pod, nil); err != nil {
			t.Fatal(err)
		}
	}
	if after := settledWatches(t, cp); after != before {
		t.Errorf("19 more pods selecting the same bundle changed the API server's watches from %v to %v; want no change", before, after)
	}
	if got := a.metric(t, "trustsync_agent_volumes"); got != "20" {
		t.Errorf("trustsync_agent_volumes = %q, want 20", got)
	}
	if got := a.metric(t, `trustsync_agent_publish_total{result="ok"}`); got != "20" {
		t.Errorf(`trustsync_agent_publish_total{result="ok"} = %q, want 20`, got)
	}
}

// settledWatches is the API server's open watches once the count holds still.
func settledWatches(t testing.TB, cp *controlplane.ControlPlane) float64 {
	t.Helper()
	last := -1.0
	for range 100 {
		u, err := cp.Usage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if u.Watches == last {
			return last
		}
		last = u.Watches
		time.Sleep(300 * time.Millisecond)
	}
	return last
}

// The kubelet publishes a live volume again and again (requiresRepublish), each time
// with the pod's renewed token: the agent keeps the new token and reads with it, and
// changes nothing else; the same volume asked for at another target is refused,
// naming where it is.
func TestAgent_RepublishTakesTheRenewedTokenAndKeepsTheVolume(t *testing.T) {
	cp := planes.Get(t, true)
	root, extra, newer := fixtures.CA("republish"), fixtures.CA("republish extra"), fixtures.CA("republish extra 2")
	name := newBundle(t, cp, root)
	webSources(t, cp, extra, "s3cret")
	a := startAgent(t, cp)
	pod := newPod(t, cp, "republish", "web", nodeName, map[string]string{injector.AnnotationSources: sourcesFor(name)})
	if err := a.publish(t, cp, pod, nil); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(a.dataDir, a.volumeDirs(t)[0], "token")
	first, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a token issued a second later differs
	if err := a.publish(t, cp, pod, nil); err != nil {
		t.Fatalf("republish: %v", err)
	}
	if second, err := os.ReadFile(tokenFile); err != nil || string(first) == string(second) {
		t.Errorf("the republished token was not kept: %v", err)
	}
	// Still read with the pod's token: a ConfigMap edit arrives.
	cm, err := kube(t, cp).CoreV1().ConfigMaps(namespace).Get(context.Background(), "extra-cas", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["ca.crt"] = fixtures.Bundle(newer)
	if _, err := kube(t, cp).CoreV1().ConfigMaps(namespace).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(a.target(pod), "ca.pem"), merged(root, newer))

	err = a.publish(t, cp, pod, func(attrs map[string]string) {
		attrs["csi.storage.k8s.io/pod.uid"] = "11111111-1111-1111-1111-111111111111"
	})
	if status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "is already published at "+a.target(pod)) {
		t.Errorf("the same volume for another pod: %v, want AlreadyExists naming where it is", err)
	}
	if got, _ := os.ReadFile(filepath.Join(a.target(pod), "ca.pem")); string(got) != string(merged(root, newer)) {
		t.Errorf("the volume's file changed: %q", got)
	}
}
