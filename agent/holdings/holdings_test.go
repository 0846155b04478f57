package holdings

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/fixtures"
)

// projectedPod is a pod with one projected bundle written to file in volume "roots".
func projectedPod(uid, file string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "pod-" + uid, UID: types.UID("uid-" + uid)},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To("corp"), Path: file}}},
		}}}}}}
}

// volume makes the pod's volume directory on the fake node and returns it.
func volume(t *testing.T, podsDir string, pod *corev1.Pod) string {
	t.Helper()
	dir, ok := VolumeDir(podsDir, pod, "roots")
	if !ok {
		t.Fatal("no volume directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeAtomic lays the file out as the kubelet's atomic writer does: the file a
// symlink into ..data, a symlink to a timestamped directory.
func writeAtomic(t *testing.T, dir, file string, data []byte, version string) {
	t.Helper()
	ts := filepath.Join(dir, "..v"+version)
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, file), data, 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink("..v"+version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	_ = os.Symlink(filepath.Join("..data", file), filepath.Join(dir, file))
}

func TestScan_ReadsTrustFilesBeneathTheirVolumeAlone(t *testing.T) {
	podsDir := t.TempDir()
	a, b := fixtures.CA("holdings a"), fixtures.CA("holdings b")
	secret := filepath.Join(t.TempDir(), "tls.key")
	if err := os.WriteFile(secret, []byte(fixtures.Bundle(a)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		lay     func(t *testing.T, dir string)
		anchors int
		err     string
	}{
		{name: "a file the kubelet's atomic writer laid out is read through its links", anchors: 2,
			lay: func(t *testing.T, dir string) { writeAtomic(t, dir, "ca.pem", []byte(fixtures.Bundle(a, b, a)), "1") }},
		{name: "a symlink out of the volume (at another pod's key) is not followed", err: "open beneath",
			lay: func(t *testing.T, dir string) { must(t, os.Symlink(secret, filepath.Join(dir, "ca.pem"))) }},
		{name: "a relative symlink climbing out of the volume is not followed", err: "open beneath",
			lay: func(t *testing.T, dir string) {
				must(t, os.Symlink("../../../../../"+secret, filepath.Join(dir, "ca.pem")))
			}},
		{name: "a FIFO is not waited on", err: "not a regular file",
			lay: func(t *testing.T, dir string) { must(t, syscall.Mkfifo(filepath.Join(dir, "ca.pem"), 0o644)) }},
		{name: "a file holding a key is not a trust file, and its content is not reported", err: "not a PEM trust file",
			lay: func(t *testing.T, dir string) {
				must(t, os.WriteFile(filepath.Join(dir, "ca.pem"), []byte(fixtures.Bundle(a)+"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o644))
			}},
		{name: "a file not written yet says so", err: "not written yet", lay: func(*testing.T, string) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := projectedPod(strings.ReplaceAll(tc.name, " ", "-")[:20], "ca.pem")
			tc.lay(t, volume(t, podsDir, pod))
			o := &Scanner{PodsDir: podsDir}
			done := make(chan []Pod)
			go func() { held, _ := o.Scan([]*corev1.Pod{pod}); done <- held }()
			var held []Pod
			select {
			case held = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the scan blocked")
			}
			f := held[0].Files[0]
			if len(f.Anchors) != tc.anchors || !strings.Contains(f.Err, tc.err) {
				t.Errorf("got %d anchors, error %q; want %d, an error containing %q", len(f.Anchors), f.Err, tc.anchors, tc.err)
			}
		})
	}
}

func TestScan_ReportsAChangeOnlyWhenAFileWasRewritten(t *testing.T) {
	podsDir := t.TempDir()
	pod := projectedPod("change", "ca.pem")
	dir := volume(t, podsDir, pod)
	writeAtomic(t, dir, "ca.pem", []byte(fixtures.Bundle(fixtures.CA("one"))), "1")
	o := &Scanner{PodsDir: podsDir}
	steps := []struct {
		name    string
		do      func()
		changed bool
	}{
		{name: "the first scan", do: func() {}, changed: true},
		{name: "nothing rewritten", do: func() {}, changed: false},
		{name: "a new version swapped in", changed: true, do: func() {
			must(t, os.Remove(filepath.Join(dir, "..data")))
			writeAtomic(t, dir, "ca.pem", []byte(fixtures.Bundle(fixtures.CA("two"))), "2")
		}},
		{name: "the pod gone", changed: true, do: func() { pod = nil }},
	}
	var last []string
	for _, s := range steps {
		s.do()
		pods := []*corev1.Pod{pod}
		if pod == nil {
			pods = nil
		}
		held, changed := o.Scan(pods)
		if changed != s.changed {
			t.Errorf("%s: changed %v, want %v", s.name, changed, s.changed)
		}
		if len(held) > 0 {
			if s.name == "a new version swapped in" && strings.Join(held[0].Files[0].Anchors, ",") == strings.Join(last, ",") {
				t.Errorf("%s: the anchors did not change", s.name)
			}
			last = held[0].Files[0].Anchors
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestScan_KeepsEachHeldAnchorParsedAndForgetsWhatNoFileHolds(t *testing.T) {
	podsDir := t.TempDir()
	one, two := fixtures.CA("one"), fixtures.CA("two")
	a, b := projectedPod("a", "ca.pem"), projectedPod("b", "ca.pem")
	writeAtomic(t, volume(t, podsDir, a), "ca.pem", []byte(fixtures.Bundle(one, two)), "1")
	writeAtomic(t, volume(t, podsDir, b), "ca.pem", []byte(fixtures.Bundle(one)), "1")
	o := &Scanner{PodsDir: podsDir}
	o.Scan([]*corev1.Pod{a, b})
	for _, c := range []*fixtures.Cert{one, two} {
		got, ok := o.Anchor(bundle.AnchorID(c.Cert.Raw))
		if !ok || !got.NotAfter.Equal(c.Cert.NotAfter) || got.Name != c.Cert.Subject.CommonName {
			t.Errorf("anchor %s: %+v, %v; want it parsed, with its NotAfter and name", c.Cert.Subject.CommonName, got, ok)
		}
	}
	o.Scan([]*corev1.Pod{b})
	if _, ok := o.Anchor(bundle.AnchorID(two.Cert.Raw)); ok {
		t.Error("an anchor no file holds any more is still kept")
	}
	if _, ok := o.Anchor(bundle.AnchorID(one.Cert.Raw)); !ok {
		t.Error("an anchor a file still holds was forgotten")
	}
}
