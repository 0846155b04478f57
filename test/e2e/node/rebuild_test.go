package node

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/cmd/kubectl-trustsync/plugin"
)

// A rebuild of a changed tree is a new version (hack/version.sh: what git describe
// adds, and a hash of the change), stamped into the binaries, the image's tag and the
// chart's default: helm upgrade after README's build and import rolls every workload
// onto it, and kubectl trustsync version shows the plugin and the cluster agreeing.
func TestChart_ARebuildOfAChangedTreeRollsOutUnderHelmUpgrade(t *testing.T) {
	n := installChart(t)
	ctx := context.Background()
	deployment := func() string {
		d, err := n.Client.AppsV1().Deployments(releaseNamespace).Get(ctx, "trustsync-webhook", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d.Spec.Template.Spec.Containers[0].Image
	}
	before := deployment()

	// A change to the tree: a file of its own, untracked.
	probe := filepath.Join(n.Root, "rebuild-probe.txt")
	if err := os.WriteFile(probe, []byte(time.Now().String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(probe) })
	out, err := exec.Command(filepath.Join(n.Root, "hack", "version.sh")).Output()
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(out))
	if strings.HasSuffix(before, ":v"+version) || !strings.Contains(version, ".dirty-") {
		t.Fatalf("the changed tree's version %q: want a new one, marked dirty (the image ran %s)", version, before)
	}

	// README's build and import, then helm upgrade.
	ctx2, cancel := context.WithTimeout(ctx, 8*time.Minute)
	defer cancel()
	for _, c := range []string{"make image build", "ctr -n k8s.io images import _output/trustsync-image.tar"} {
		if _, err := n.Shell(ctx2, c); err != nil {
			t.Fatal(err)
		}
	}
	upgradeChart(t, n)
	if after := deployment(); after != "ghcr.io/trustsync/trustsync:v"+version {
		t.Errorf("after the rebuild and helm upgrade the webhook runs %s, want ghcr.io/trustsync/trustsync:v%s", after, version)
	}
	var v plugin.Versions
	kubectlTrustsync(t, n, &v, "version")
	if v.Version != version || len(v.Server) != 4 {
		t.Fatalf("kubectl trustsync version: %+v; want the plugin at %s and four components", v, version)
	}
	for _, s := range v.Server {
		if s.Version != version || !strings.HasSuffix(s.Image, ":v"+version) {
			raw, _ := json.Marshal(v)
			t.Errorf("%s runs %s (%s), want %s: %s", s.Component, s.Version, s.Image, version, raw)
		}
	}
}
