package trustfiles

import (
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/injector"
)

func injected(t *testing.T, annotations map[string]string) *corev1.Pod {
	t.Helper()
	a := map[string]string{v1alpha1.AnnotationInject: "true"}
	for k, v := range annotations {
		a[k] = v
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: a},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
	res, err := injector.Inject(pod, "apps", nil, injector.Config{NodeAgent: true, NativeAPIs: injector.NativeAPIs{ClusterTrustBundles: true, PodCertificates: true}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := res.Apply(pod)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTrustFiles_ListsEveryDeliverysTrustFilesAndNeverACertificate(t *testing.T) {
	handMade := &corev1.Pod{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "roots", MountPath: "/etc/roots"}}}},
		Volumes: []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To("corp-roots"), Path: "roots.pem"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "other"}}},
		}}}}},
	}}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want []TrustFile
	}{
		{name: "the sidecar's files, read back from its arguments, as the app mounts them",
			pod: injected(t, map[string]string{injector.AnnotationBundleName: "corp-roots", injector.AnnotationCertificate: "true"}),
			want: []TrustFile{{Delivery: v1alpha1.DeliverySidecar, Volume: "trustsync-anchors", File: injector.DefaultPath, Format: v1alpha1.FormatPEM,
				MountPaths: []string{injector.DefaultMountPath + "/" + injector.DefaultPath}, Sources: []v1alpha1.Source{{Name: "corp-roots", Path: injector.DefaultPath}}}}},
		{name: "the node agent's files, read back from the volume's attributes",
			pod: injected(t, map[string]string{injector.AnnotationBundleName: "corp-roots", injector.AnnotationDelivery: "node"}),
			want: []TrustFile{{Delivery: v1alpha1.DeliveryNode, Volume: "trustsync-anchors", File: injector.DefaultPath, Format: v1alpha1.FormatPEM,
				MountPaths: []string{injector.DefaultMountPath + "/" + injector.DefaultPath}, Sources: []v1alpha1.Source{{Name: "corp-roots", Path: injector.DefaultPath}}}}},
		{name: "the kubelet's projected bundle, injected with delivery native",
			pod: injected(t, map[string]string{injector.AnnotationBundleName: "corp-roots", injector.AnnotationDelivery: "native"}),
			want: []TrustFile{{Delivery: v1alpha1.DeliveryNative, Volume: "trustsync-anchors", File: injector.DefaultPath, Format: v1alpha1.FormatPEM,
				MountPaths: []string{injector.DefaultMountPath + "/" + injector.DefaultPath}, Sources: []v1alpha1.Source{{Name: "corp-roots", Path: injector.DefaultPath}}}}},
		{name: "a projected bundle written by hand, without trustsync's annotations; other projections are not trust files",
			pod: handMade,
			want: []TrustFile{{Delivery: v1alpha1.DeliveryNative, Volume: "roots", File: "roots.pem", Format: v1alpha1.FormatPEM,
				MountPaths: []string{"/etc/roots/roots.pem"}, Sources: []v1alpha1.Source{{Name: "corp-roots", Path: "roots.pem"}}}}},
		{name: "a pod without trust has none", pod: &corev1.Pod{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Delivered(tc.pod)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d files %+v, want %+v", len(got), got, tc.want)
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if g.Delivery != w.Delivery || g.Volume != w.Volume || g.File != w.File || g.Format != w.Format || g.Path() != w.Path() ||
					len(g.Sources) != len(w.Sources) || g.Sources[0].Name != w.Sources[0].Name {
					t.Errorf("file %d:\n got %+v\nwant %+v", i, g, w)
				}
				if v1alpha1.ReservedPaths.Has(g.File) {
					t.Errorf("file %d is a certificate's file %q", i, g.File)
				}
			}
		})
	}
}

func TestDelivered_ASubPathReaderIsAFileOfItsOwn(t *testing.T) {
	mounts := func(ms ...corev1.VolumeMount) []corev1.Container {
		return []corev1.Container{{Name: "app", VolumeMounts: ms}}
	}
	pod := func(containers []corev1.Container) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: containers,
			Volumes: []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To("corp-roots"), Path: "ca.pem"}}}}}}}}}
	}
	dir := corev1.VolumeMount{Name: "roots", MountPath: "/etc/roots"}
	sub := corev1.VolumeMount{Name: "roots", MountPath: "/etc/ssl/certs/corp.pem", SubPath: "ca.pem"}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want []string // path, and the subPath container and index
	}{
		{"a directory mount reads the volume's file", pod(mounts(dir)), []string{"/etc/roots/ca.pem"}},
		{"a subPath mount alone is the container's own file, and the volume's file nobody's", pod(mounts(sub)), []string{"/etc/ssl/certs/corp.pem app 0"}},
		{"both: the volume's file, then the subPath reader's", pod(mounts(dir, sub)), []string{"/etc/roots/ca.pem", "/etc/ssl/certs/corp.pem app 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range Delivered(tc.pod) {
				s := f.Path()
				if f.SubPath != nil {
					s += " " + f.SubPath.Container + " " + strconv.Itoa(f.SubPath.Index)
				}
				got = append(got, s)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("files %v, want %v", got, tc.want)
			}
		})
	}
}

// A volume of trustsync's CSI driver is a node delivery whoever wrote it (the agent
// published it); one of another driver is not, whatever the pod's annotations claim.
func TestDelivered_ANodeDeliveryIsAVolumeOfTrustsyncsDriver(t *testing.T) {
	csi := func(driver string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			v1alpha1.AnnotationStatus: `{"volume": "roots", "delivery": "node"}`}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "roots", MountPath: "/etc/roots"}}}},
				Volumes: []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: driver,
					VolumeAttributes: map[string]string{"sources": `[{"name": "corp-roots", "path": "ca.pem"}]`}}}}}}}
	}
	handWritten := csi("csi.trustsync.io")
	handWritten.Annotations = nil
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		files int
	}{
		{"trustsync's driver, written by hand without annotations", handWritten, 1},
		{"another driver, with a forged status saying node", csi("secrets-store.csi.k8s.io"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Delivered(tc.pod)
			if len(got) != tc.files || (tc.files > 0 && (got[0].Delivery != v1alpha1.DeliveryNode || got[0].File != "ca.pem")) {
				t.Errorf("files %+v; want %d node delivery of ca.pem", got, tc.files)
			}
		})
	}
}
