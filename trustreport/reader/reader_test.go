package reader

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/trustfiles"
)

// A slimmed pod answers every question the read model asks as the pod itself does,
// and keeps nothing else of weight.
func TestSlim_KeepsWhatTheReadModelReadsAndDropsTheRest(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web", Annotations: map[string]string{v1alpha1.AnnotationInject: "true", injector.AnnotationBundleName: "corp"}}}
	pod.Spec.Containers = []corev1.Container{{Name: "app", Image: "registry.example/app:1", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
		Env:          []corev1.EnvVar{{Name: "LITERAL", Value: "big value"}, {Name: "CA", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "trust-ca"}, Key: "ca.pem"}}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "trust", MountPath: "/etc/trust"}}}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "trust", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "trust-ca"}}}}}
	res, err := injector.Inject(pod, "apps", nil, injector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if pod, err = res.Apply(pod); err != nil {
		t.Fatal(err)
	}
	pod.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = "{...}"
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	pod.Spec.NodeName = "n"
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "registry.example/app:1", RestartCount: 2,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	objs := trustfiles.Objects{}
	objs.Add(&trustfiles.Object{Kind: v1alpha1.KindConfigMap, Namespace: "apps", Name: "trust-ca", Keys: []trustfiles.Key{{Key: "ca.pem", Format: "pem"}}})

	got, err := Slim(pod)
	if err != nil {
		t.Fatal(err)
	}
	slim := got.(*corev1.Pod)
	if a, b := trustfiles.Of(slim, objs), trustfiles.Of(pod, objs); !reflect.DeepEqual(a, b) || len(a) != 2 {
		t.Errorf("trust files of the slim pod:\n%+v\nof the pod:\n%+v", a, b)
	}
	if a, b := trustfiles.EnvReaders(slim, objs), trustfiles.EnvReaders(pod, objs); !reflect.DeepEqual(a, b) || len(a) != 1 {
		t.Errorf("env readers of the slim pod %+v, of the pod %+v", a, b)
	}
	if !reflect.DeepEqual(slim.Status.ContainerStatuses[0].State, pod.Status.ContainerStatuses[0].State) || slim.Status.ContainerStatuses[0].RestartCount != 2 || slim.Status.Phase != corev1.PodRunning {
		t.Errorf("the slim pod's status %+v lost whether it started", slim.Status)
	}
	if slim.ManagedFields != nil || slim.Annotations["kubectl.kubernetes.io/last-applied-configuration"] != "" || slim.Spec.Containers[0].Image != "" ||
		len(slim.Spec.Containers[len(slim.Spec.Containers)-1].Env) > 1 || slim.Status.PodIP != "" {
		t.Errorf("the slim pod keeps what the read model never reads: %+v", slim)
	}
}
