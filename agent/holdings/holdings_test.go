package holdings

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/truststore"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/trustfiles"
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

func must(t testing.TB, err error) {
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

func TestScan_ReadsTheKeysOfTrustObjectsAPodMountsInTheirFormatAndNoOtherKey(t *testing.T) {
	podsDir := t.TempDir()
	a, b := fixtures.CA("object a"), fixtures.CA("object b")
	anchors := []*bundle.Anchor{bundle.NewAnchor(a.Cert.Raw), bundle.NewAnchor(b.Cert.Raw)}
	p12, err := truststore.EncodePKCS12(anchors, v1alpha1.DefaultStorePassword, truststore.Modern2023)
	must(t, err)
	jks, err := truststore.EncodeJKS(anchors, v1alpha1.DefaultStorePassword)
	must(t, err)
	objs := trustfiles.Objects{}
	objs.Add(&trustfiles.Object{Kind: v1alpha1.KindConfigMap, Namespace: "apps", Name: "trust-ca", Keys: []trustfiles.Key{
		{Key: "ca.pem", Format: v1alpha1.FormatPEM}, {Key: "trust.p12", Format: v1alpha1.FormatPKCS12}, {Key: "trust.jks", Format: v1alpha1.FormatJKS},
		{Key: "broken.p12", Format: v1alpha1.FormatPKCS12},
		{Key: "locked.p12", Format: v1alpha1.FormatPKCS12, Sources: []v1alpha1.Source{{Name: "corp", Path: "locked.p12", Format: v1alpha1.FormatPKCS12, PasswordSecret: &v1alpha1.KeyRef{Name: "pw", Key: "password"}}}},
	}})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "java", UID: "uid-java"}, Spec: corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "trust-ca"}}}}}}}
	dir := volume(t, podsDir, pod)
	if !strings.Contains(dir, "kubernetes.io~configmap") {
		t.Fatalf("a configMap volume's directory is %s; want the kubelet's kubernetes.io~configmap", dir)
	}
	// The kubelet lays every key out; a key that is no trust file (secret.txt) must
	// not be read however it looks.
	ts := filepath.Join(dir, "..2026_11_26")
	must(t, os.Mkdir(ts, 0o755))
	for name, data := range map[string][]byte{"ca.pem": []byte(fixtures.Bundle(a)), "trust.p12": p12, "trust.jks": jks, "locked.p12": p12, "broken.p12": []byte("not a store"), "secret.txt": []byte(fixtures.Bundle(a))} {
		must(t, os.WriteFile(filepath.Join(ts, name), data, 0o644))
		must(t, os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)))
	}
	must(t, os.Symlink("..2026_11_26", filepath.Join(dir, "..data")))

	o := &Scanner{PodsDir: podsDir}
	if held, _ := o.Scan([]*corev1.Pod{pod}); len(held) != 0 {
		t.Fatalf("before the scanner knows trust-ca is a trust object it read %+v", held)
	}
	o.SetObjects(objs)
	held, _ := o.Scan([]*corev1.Pod{pod})
	if len(held) != 1 {
		t.Fatalf("held %+v; want the pod", held)
	}
	got := map[string]string{}
	for _, f := range held[0].Files {
		got[f.File] = fmt.Sprintf("%s %d %s", f.Delivery, len(f.Anchors), f.Err)
	}
	// A key that is not what its format says is named unreadable; its neighbours are
	// read all the same.
	if e := got["broken.p12"]; !strings.HasPrefix(e, "configMap 0 not a pkcs12 trust file: ") {
		t.Errorf("a broken truststore: %q; want it reported not a pkcs12 trust file", e)
	}
	delete(got, "broken.p12")
	want := map[string]string{
		"ca.pem":     "configMap 1 ",
		"trust.p12":  "configMap 2 ",
		"trust.jks":  "configMap 2 ",
		"locked.p12": "configMap 0 a pkcs12 truststore whose password is in Secret pw (key password), which the agent does not read",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("files: %v; want %v (and secret.txt never read)", got, want)
	}
}

// A container mounting the trust file through subPath sees what the kubelet bound
// when it started, never a later write: what it holds is read from its own bind
// (volume-subpaths/VOLUME/CONTAINER/INDEX), apart from the volume's file the other
// containers see. (The agent read the volume's file alone, and counted subPath
// readers as holding a CA they never got.)
func TestScan_ASubPathReaderIsReadFromItsOwnBindOfTheFile(t *testing.T) {
	podsDir := t.TempDir()
	old, next := fixtures.CA("subpath old"), fixtures.CA("subpath new")
	pod := projectedPod("subpath", "ca.pem")
	pod.Spec.Containers = []corev1.Container{
		{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "roots", MountPath: "/etc/roots"}}},
		{Name: "legacy", VolumeMounts: []corev1.VolumeMount{{Name: "other", MountPath: "/x"}, {Name: "roots", MountPath: "/etc/ssl/certs/corp.pem", SubPath: "ca.pem"}}},
	}
	writeAtomic(t, volume(t, podsDir, pod), "ca.pem", []byte(fixtures.Bundle(next)), "2")
	// The kubelet's bind of the file as it was when legacy started (index 1 of its
	// mounts); a regular file stands in for the bind mount here.
	bind := filepath.Join(podsDir, string(pod.UID), "volume-subpaths", "roots", "legacy")
	must(t, os.MkdirAll(bind, 0o755))
	must(t, os.WriteFile(filepath.Join(bind, "1"), []byte(fixtures.Bundle(old)), 0o644))

	held, _ := (&Scanner{PodsDir: podsDir}).Scan([]*corev1.Pod{pod})
	got := map[string][]string{}
	for _, f := range held[0].Files {
		container := ""
		if f.SubPath != nil {
			container = f.SubPath.Container
		}
		got[container+" "+f.Path()] = f.Anchors
	}
	want := map[string][]string{
		" /etc/roots/ca.pem":             {bundle.AnchorID(next.Cert.Raw)},
		"legacy /etc/ssl/certs/corp.pem": {bundle.AnchorID(old.Cert.Raw)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("held %v, want %v", got, want)
	}
}

// hostilePod is a pod of 20 projected trust files, each filled with size bytes of
// certificates, distinct across files or the same in each (the attack: 20 files of
// 4 MiB of distinct certificates took the agent past its 512 MiB limit).
func hostilePod(t testing.TB, podsDir, uid string, size int, distinct bool) *corev1.Pod {
	t.Helper()
	pod := projectedPod(uid, "ca-00.pem")
	sources := pod.Spec.Volumes[0].Projected.Sources[:0]
	for i := range 20 {
		sources = append(sources, corev1.VolumeProjection{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To("corp"), Path: fmt.Sprintf("ca-%02d.pem", i)}})
	}
	pod.Spec.Volumes[0].Projected.Sources = sources
	dir, _ := VolumeDir(podsDir, pod, "roots")
	must(t, os.MkdirAll(dir, 0o755))
	var data []byte
	for i := range 20 {
		if distinct || data == nil {
			var err error
			data, err = fixtures.DistinctPEM(size, int64(i)<<32)
			must(t, err)
		}
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("ca-%02d.pem", i)), data, 0o644))
	}
	return pod
}

// One pod may have the agent read at most MaxPodBytes of at most MaxPodFiles trust
// files, and the agent names no more than MaxNamedAnchors: the rest is reported as
// not read, saying which bound, and never held.
func TestScan_WhatOnePodHasReadIsBounded(t *testing.T) {
	podsDir := t.TempDir()
	pod := hostilePod(t, podsDir, "hostile", 1<<20, false)
	o := &Scanner{PodsDir: podsDir}
	held, _ := o.Scan([]*corev1.Pod{pod})
	var read, overBytes, overFiles, bytes int
	for _, f := range held[0].Files {
		switch {
		case f.Err == "":
			read++
			info, err := os.Stat(filepath.Join(podsDir, string(pod.UID), "volumes/kubernetes.io~projected/roots", f.File))
			must(t, err)
			bytes += int(info.Size())
		case strings.Contains(f.Err, "the pod's trust files hold more than 4194304 bytes together: not read"):
			overBytes++
		case strings.Contains(f.Err, "the pod has 20 trust files, more than the 16 read of one pod"):
			overFiles++
		default:
			t.Errorf("%s: unexpected error %q", f.File, f.Err)
		}
	}
	if read == 0 || bytes > MaxPodBytes || overBytes == 0 || overFiles != 1 || read+overBytes != MaxPodFiles {
		t.Errorf("%d files read (%d bytes), %d over the bytes, %d over the files; want the first within %d bytes read, the rest of the first %d refused, one saying the count", read, bytes, overBytes, overFiles, MaxPodBytes, MaxPodFiles)
	}
	if len(o.anchors) > MaxNamedAnchors {
		t.Errorf("%d anchors named, more than %d", len(o.anchors), MaxNamedAnchors)
	}
	for _, a := range o.anchors {
		if len(a.DER) > 0 || len(a.Name) > maxNameLength {
			t.Fatalf("an anchor kept with its certificate (%d bytes) or a name of %d bytes", len(a.DER), len(a.Name))
		}
	}
}

// A file that is not a trust file is not read again while it is unchanged: a pod
// cannot have the agent decode its junk at every scan.
func TestScan_AFileThatIsNoTrustFileIsNotReadAgainUnchanged(t *testing.T) {
	podsDir := t.TempDir()
	pod := projectedPod("junk", "ca.pem")
	must(t, os.WriteFile(filepath.Join(volume(t, podsDir, pod), "ca.pem"), []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0o644))
	o := &Scanner{PodsDir: podsDir}
	first, _ := o.Scan([]*corev1.Pod{pod})
	if !strings.Contains(first[0].Files[0].Err, "not a PEM trust file") {
		t.Fatalf("error %q", first[0].Files[0].Err)
	}
	if _, changed := o.Scan([]*corev1.Pod{pod}); changed {
		t.Error("an unchanged file that is no trust file was seen as a change")
	}
	if st := o.seen[filepath.Join(podsDir, string(pod.UID), "volumes/kubernetes.io~projected/roots/ca.pem")]; !st.final {
		t.Error("its refusal is not kept for its stamp: it would be decoded again at every scan")
	}
}

// BenchmarkScan_HostilePod is what the agent keeps (the Go heap in use after a scan,
// the garbage collected) for one pod whose 20 trust files are each filled with 1 MiB
// of distinct certificates (about 2,700 each): at most MaxPodBytes of it is read.
func BenchmarkScan_HostilePod(b *testing.B) {
	podsDir := b.TempDir()
	pod := hostilePod(b, podsDir, "hostile", 1<<20, true)
	var before, after runtime.MemStats
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		o := &Scanner{PodsDir: podsDir}
		o.Scan([]*corev1.Pod{pod})
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(o)
	}
	b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/(1<<20), "MiB-kept")
}
