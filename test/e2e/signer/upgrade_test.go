package signer

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// signerRunsTargets is the last commit whose trustsync-signer ran the TrustTarget and
// injection controllers itself, before trustsync-controller took them over.
const signerRunsTargets = "63f9a93fc15930499ff0706cfb5378f85017a59b"

// buildAt builds ./cmd/<name> of commit, from this repository's history.
func buildAt(t *testing.T, commit, name string) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %s | tar -x -C %q", root, commit, src))
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("cannot read commit %s from the repository's history (a clone with history is needed): %v\n%s", commit, err, out)
	}
	bin := filepath.Join(t.TempDir(), "trustsync-"+name)
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/"+name)
	build.Dir, build.Env = src, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/%s at %s: %v\n%s", name, commit, err, out)
	}
	return bin
}

// Upgrading from the signer that ran the targets to trustsync-controller moves the
// work without a gap and loses nothing: the objects the signer wrote (a TrustTarget's
// ConfigMap, whose second source is gone, and an annotated ConfigMap) are adopted as
// they are (the same object, not written again), the key whose source is gone is
// kept, and the next edit reaches them from the controller.
func TestUpgrade_TheControllerAdoptsWhatTheSignerWrote(t *testing.T) {
	oldSigner := buildAt(t, signerRunsTargets, "signer")
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	ctx := context.Background()
	if err := cp.InstallTargetsCRD(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cp.CreateNamespace(ctx, signerNamespace, nil); err != nil {
		t.Fatal(err)
	}
	client := kube(t, cp.AdminConfig())
	one, two, next := fixtures.CA("upgrade one"), fixtures.CA("upgrade two"), fixtures.CA("upgrade next")
	controlplane.NativeBundle(t, client, "upgrade-one", one)
	controlplane.NativeBundle(t, client, "upgrade-two", two)
	controlplane.LabelledNamespace(t, client, "upgrade-apps", map[string]string{"trust": "upgrade"})
	controlplane.CreateTarget(t, cp, "upgrade", map[string]any{
		"sources": []any{map[string]any{"name": "upgrade-one", "path": "one.crt"}, map[string]any{"name": "upgrade-two", "path": "two.crt"}},
		"target":  map[string]any{"configMap": map[string]any{"name": "roots"}, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"trust": "upgrade"}}},
	})
	if _, err := client.CoreV1().ConfigMaps("upgrade-apps").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "annotated",
		Annotations: map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "upgrade-one", "trustsync.io/path": "one.crt"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := controlplane.WriteKubeconfig(kubeconfig, cp.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	old, err := controlplane.StartProcess("trustsync-signer (previous)", oldSigner, []string{"--kubeconfig=" + kubeconfig, "--namespace=" + signerNamespace,
		"--health-bind-address=", "--leader-elect=false", "--signer-name=" + workload}, filepath.Join(t.TempDir(), "old-signer.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"roots", "annotated"} {
		poll.True(t, time.Minute, "the previous signer writing "+name, func() bool {
			v, _ := controlplane.ConfigMapKey(t, client, "upgrade-apps", name, "one.crt")
			return v == string(one.CertPEM())
		})
	}
	poll.True(t, time.Minute, "the previous signer writing two.crt", func() bool {
		v, _ := controlplane.ConfigMapKey(t, client, "upgrade-apps", "roots", "two.crt")
		return v == string(two.CertPEM())
	})
	if err := client.CertificatesV1().ClusterTrustBundles().Delete(ctx, "upgrade-two", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	controlplane.WaitTargetReason(t, cp, "upgrade", "SourceMissing")
	before := map[string]*corev1.ConfigMap{}
	for _, name := range []string{"roots", "annotated"} {
		if before[name], err = client.CoreV1().ConfigMaps("upgrade-apps").Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	old.Stop(10 * time.Second)

	// The new pair: a signer without targets, and the controller.
	signer, err := cp.StartSigner("--namespace="+signerNamespace, "--signer-name="+workload)
	if err != nil {
		t.Fatal(err)
	}
	defer signer.Stop(10 * time.Second)
	controller, err := cp.StartController("--namespace=" + signerNamespace)
	if err != nil {
		t.Fatal(err)
	}
	defer controller.Stop(10 * time.Second)
	poll.True(t, time.Minute, "the controller reconciling the target and the annotated ConfigMap", func() bool {
		metrics, err := controller.Metrics()
		return err == nil && strings.Contains(metrics, `trustsync_targets_reconciles_total{controller="targets"}`) && strings.Contains(metrics, `trustsync_targets_reconciles_total{controller="inject"}`)
	})
	for name, was := range before {
		now, err := client.CoreV1().ConfigMaps("upgrade-apps").Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("%s is gone after the upgrade: %v", name, err)
		case now.UID != was.UID:
			t.Errorf("%s was deleted and made again", name)
		case now.ResourceVersion != was.ResourceVersion:
			t.Errorf("%s was written again though nothing changed: %v -> %v", name, was.Data, now.Data)
		}
	}
	if v, _ := controlplane.ConfigMapKey(t, client, "upgrade-apps", "roots", "two.crt"); v != string(two.CertPEM()) {
		t.Errorf("two.crt, whose bundle is gone, lost its last good content in the upgrade: %q", v)
	}
	controlplane.SetNativeBundle(t, client, "upgrade-one", next)
	for _, name := range []string{"roots", "annotated"} {
		poll.True(t, time.Minute, "the controller writing the edit into "+name, func() bool {
			v, _ := controlplane.ConfigMapKey(t, client, "upgrade-apps", name, "one.crt")
			return v == string(next.CertPEM())
		})
	}
	if v, _ := controlplane.ConfigMapKey(t, client, "upgrade-apps", "roots", "two.crt"); v != string(two.CertPEM()) {
		t.Errorf("two.crt lost its last good content with the first edit after the upgrade: %q", v)
	}
	if strings.Contains(signer.Tail(), "TrustTarget") {
		t.Errorf("the new signer runs TrustTargets:\n%s", signer.Tail())
	}
}
