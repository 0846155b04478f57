package injector

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/contract"
)

func TestAsks_EveryWayAPodAsksForTrustIsListed(t *testing.T) {
	live := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/cluster-trust-bundle-version": "live"}}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		ns          map[string]string
		volumes     []corev1.Volume
		want        []string
	}{
		{name: "a pod that asks for nothing asks nothing"},
		{name: "annotations not asking for injection ask nothing",
			annotations: map[string]string{AnnotationBundleName: "corp"}},
		{name: "a bundle and a certificate by annotation",
			annotations: map[string]string{v1alpha1.AnnotationInject: "true", AnnotationBundleName: "corp", AnnotationCertificate: "true",
				AnnotationCertificateSigner: "example.com/s", AnnotationCertificateDNSNames: "a.apps.svc"},
			want: []string{"the pod's trustsync annotations: bundle corp", "annotation trustsync.io/certificate-signer: signer example.com/s [a.apps.svc]"}},
		{name: "the namespace's default annotations count",
			annotations: map[string]string{v1alpha1.AnnotationInject: "true"}, ns: map[string]string{AnnotationBundleName: "ns-default"},
			want: []string{"the pod's trustsync annotations: bundle ns-default"}},
		{name: "annotations that do not parse ask nothing (the pod is refused for them)",
			annotations: map[string]string{v1alpha1.AnnotationInject: "true", AnnotationSignerName: "bad"}},
		{name: "projected bundles by name and by signer, and a pod certificate",
			volumes: []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To("corp"), Path: "corp.pem"}},
				{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{SignerName: ptr.To("example.com/s"), LabelSelector: live, Path: "s.pem"}},
				{PodCertificate: &corev1.PodCertificateProjection{SignerName: "example.com/s", KeyType: "ED25519"}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "anything"}}},
			}}}}},
			want: []string{"volume roots (projected clusterTrustBundle): bundle corp", "volume roots (projected clusterTrustBundle): signer example.com/s kubernetes.io/cluster-trust-bundle-version=live",
				"volume roots (projected podCertificate): signer example.com/s []"}},
		{name: "an inline node-agent volume written by hand",
			volumes: []corev1.Volume{{Name: "trust", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: contract.CSIDriverName,
				VolumeAttributes: map[string]string{contract.FlagSources: `[{"name": "corp", "path": "ca.pem"}]`}}}}},
			want: []string{"volume trust (csi.trustsync.io): bundle corp"}},
		{name: "another CSI driver asks nothing of trustsync",
			volumes: []corev1.Volume{{Name: "other", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "other.example.com",
				VolumeAttributes: map[string]string{contract.FlagSources: `[{"name": "corp", "path": "ca.pem"}]`}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: tc.annotations},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}, Volumes: tc.volumes}}
			var got []string
			for _, a := range Asks(pod, tc.ns, Config{}) {
				switch {
				case a.Source != nil && a.Source.Name != "":
					got = append(got, a.Where+": bundle "+a.Source.Name)
				case a.Source != nil:
					sel, _ := metav1.LabelSelectorAsSelector(a.Source.LabelSelector)
					got = append(got, a.Where+": signer "+a.Source.SignerName+" "+sel.String())
				default:
					got = append(got, fmt.Sprintf("%s: signer %s %v", a.Where, a.Signer, a.DNSNames))
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("asks:\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}
