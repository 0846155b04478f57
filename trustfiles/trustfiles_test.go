package trustfiles

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

func namespace(name string, labels map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func target(name string, spec v1alpha1.TrustTargetSpec) *v1alpha1.TrustTarget {
	return &v1alpha1.TrustTarget{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

var corpSources = []v1alpha1.Source{
	{Name: "corp", Path: "ca.pem"},
	{SignerName: "example.com/internal", LabelSelector: &metav1.LabelSelector{}, Path: "ca.pem"},
	{Name: "corp", Path: "truststore.p12", Format: v1alpha1.FormatPKCS12},
}

func TestFromTargets_EachSelectedNamespaceHoldsTheTargetsObject(t *testing.T) {
	gone := namespace("gone", map[string]string{"trust": "corp"})
	gone.DeletionTimestamp = &metav1.Time{}
	namespaces := []*metav1.PartialObjectMetadata{namespace("apps", map[string]string{"trust": "corp"}), namespace("other", nil), gone}
	objs := FromTargets([]*v1alpha1.TrustTarget{
		target("corp", v1alpha1.TrustTargetSpec{Sources: corpSources, Target: v1alpha1.Target{ConfigMap: &v1alpha1.ObjectRef{Name: "trust-ca"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"trust": "corp"}}}}),
		target("everywhere", v1alpha1.TrustTargetSpec{Sources: []v1alpha1.Source{{Name: "corp", Path: "ca.pem"}}, Target: v1alpha1.Target{Secret: &v1alpha1.ObjectRef{Name: "trust-ca"}}}),
		target("invalid", v1alpha1.TrustTargetSpec{Target: v1alpha1.Target{ConfigMap: &v1alpha1.ObjectRef{Name: "invalid"}}}),
	}, namespaces)

	want := map[ObjectRef][]string{
		{v1alpha1.KindConfigMap, "apps", "trust-ca"}: {"ca.pem", "truststore.p12"},
		{v1alpha1.KindSecret, "apps", "trust-ca"}:    {"ca.pem"},
		{v1alpha1.KindSecret, "other", "trust-ca"}:   {"ca.pem"},
	}
	got := map[ObjectRef][]string{}
	for ref, o := range objs {
		for _, k := range o.Keys {
			got[ref] = append(got[ref], k.Key)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("objects: %v; want %v (a terminating namespace, an unselected one and an invalid target hold none)", got, want)
	}
	if o := objs[ObjectRef{v1alpha1.KindConfigMap, "apps", "trust-ca"}]; o.Writer != "TrustTarget corp" || len(o.Keys[0].Sources) != 2 || o.Keys[1].Format != v1alpha1.FormatPKCS12 {
		t.Errorf("the ConfigMap's keys: %+v, writer %q; want ca.pem of two sources, a PKCS#12 truststore.p12, written by TrustTarget corp", o.Keys, o.Writer)
	}
}

func TestAddInjected_AnnotatedConfigMapsAndSecretsAreTrustObjectsAndCABundlesAreNot(t *testing.T) {
	objs := FromTargets([]*v1alpha1.TrustTarget{
		target("corp", v1alpha1.TrustTargetSpec{Sources: corpSources[:1], Target: v1alpha1.Target{ConfigMap: &v1alpha1.ObjectRef{Name: "trust-ca"}}}),
	}, []*metav1.PartialObjectMetadata{namespace("apps", nil)})
	objs.AddInjected(&v1alpha1.InjectedIndex{Objects: []v1alpha1.InjectedObject{
		{Kind: v1alpha1.KindConfigMap, Namespace: "apps", Name: "annotated", Sources: corpSources[2:]},
		{Kind: v1alpha1.KindSecret, Namespace: "apps", Name: "annotated", Sources: corpSources[:1]},
		{Kind: v1alpha1.KindConfigMap, Namespace: "apps", Name: "trust-ca", Sources: corpSources[2:]},
		{Kind: "ValidatingWebhookConfiguration", Name: "hooks", Sources: corpSources[:1]},
	}})
	objs.AddInjected(nil)

	got := map[ObjectRef]string{}
	for ref, o := range objs {
		got[ref] = o.Writer + ": " + o.Keys[0].Key
	}
	want := map[ObjectRef]string{
		{v1alpha1.KindConfigMap, "apps", "annotated"}: "annotation: truststore.p12",
		{v1alpha1.KindSecret, "apps", "annotated"}:    "annotation: ca.pem",
		{v1alpha1.KindConfigMap, "apps", "trust-ca"}:  "TrustTarget corp: ca.pem",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("objects: %v; want %v (a target's object stays the target's; a caBundle is no pod's file)", got, want)
	}
}

func TestObjectFiles_TheKeysOfTrustObjectsAPodMountsAreItsTrustFiles(t *testing.T) {
	objs := Objects{}
	objs.Add(&Object{Kind: v1alpha1.KindConfigMap, Namespace: "apps", Name: "trust-ca", Keys: keysOf(corpSources)})
	objs.Add(&Object{Kind: v1alpha1.KindSecret, Namespace: "apps", Name: "trust-secret", Keys: keysOf(corpSources[:1])})
	mount := func(volume, path string) corev1.VolumeMount { return corev1.VolumeMount{Name: volume, MountPath: path} }
	pem, p12, secretPEM := []v1alpha1.Source{corpSources[0], corpSources[1]}, []v1alpha1.Source{corpSources[2]}, corpSources[:1]
	for _, tc := range []struct {
		name   string
		volume corev1.VolumeSource
		want   []TrustFile
	}{
		{name: "a configMap volume holds every key, each a file",
			volume: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "trust-ca"}}},
			want: []TrustFile{
				{Delivery: v1alpha1.DeliveryConfigMap, Volume: "trust", File: "ca.pem", Format: "pem", MountPaths: []string{"/etc/trust/ca.pem"}, Sources: pem},
				{Delivery: v1alpha1.DeliveryConfigMap, Volume: "trust", File: "truststore.p12", Format: "pkcs12", MountPaths: []string{"/etc/trust/truststore.p12"}, Sources: p12},
			}},
		{name: "items rename a key and leave the others out",
			volume: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "trust-ca"},
				Items: []corev1.KeyToPath{{Key: "ca.pem", Path: "certs/corp.crt"}}}},
			want: []TrustFile{{Delivery: v1alpha1.DeliveryConfigMap, Volume: "trust", File: "certs/corp.crt", Format: "pem", MountPaths: []string{"/etc/trust/certs/corp.crt"}, Sources: pem}}},
		{name: "a secret volume of a trust Secret",
			volume: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "trust-secret"}},
			want:   []TrustFile{{Delivery: v1alpha1.DeliverySecret, Volume: "trust", File: "ca.pem", Format: "pem", MountPaths: []string{"/etc/trust/ca.pem"}, Sources: secretPEM}}},
		{name: "a projected volume's configMap and secret sources",
			volume: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "trust-ca"}, Items: []corev1.KeyToPath{{Key: "truststore.p12", Path: "java/cacerts"}}}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "trust-secret"}, Items: []corev1.KeyToPath{{Key: "ca.pem", Path: "secret.pem"}}}},
			}}},
			want: []TrustFile{
				{Delivery: v1alpha1.DeliveryConfigMap, Volume: "trust", File: "java/cacerts", Format: "pkcs12", MountPaths: []string{"/etc/trust/java/cacerts"}, Sources: p12},
				{Delivery: v1alpha1.DeliverySecret, Volume: "trust", File: "secret.pem", Format: "pem", MountPaths: []string{"/etc/trust/secret.pem"}, Sources: secretPEM},
			}},
		{name: "a ConfigMap trustsync does not write is never a trust file",
			volume: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}},
		{name: "a Secret named like a trust ConfigMap is not it",
			volume: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "trust-ca"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "app", VolumeMounts: []corev1.VolumeMount{mount("trust", "/etc/trust")}}},
				Volumes:    []corev1.Volume{{Name: "trust", VolumeSource: tc.volume}}}}
			if got := ObjectFiles(pod, objs); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("files:\n%+v\nwant\n%+v", got, tc.want)
			}
			other := pod.DeepCopy()
			other.Namespace = "elsewhere"
			if got := ObjectFiles(other, objs); len(got) != 0 {
				t.Errorf("in a namespace without the object: %+v; want none", got)
			}
		})
	}
}

func TestEnvReaders_EnvAndEnvFromOfATrustObjectAreNamed(t *testing.T) {
	objs := Objects{}
	objs.Add(&Object{Kind: v1alpha1.KindConfigMap, Namespace: "apps", Name: "trust-ca", Keys: keysOf(corpSources)})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"}, Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "trust-ca"}}}}}},
		Containers: []corev1.Container{{Name: "app", Env: []corev1.EnvVar{
			{Name: "CA", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "trust-ca"}, Key: "ca.pem"}}},
			{Name: "OTHER", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}, Key: "x"}}},
			{Name: "NOT_A_KEY", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "trust-ca"}, Key: "x"}}},
			{Name: "PLAIN", Value: "v"},
		}}},
	}}
	got := EnvReaders(pod, objs)
	var described []string
	for _, r := range got {
		described = append(described, r.Describe())
	}
	want := []string{
		"container init reads ConfigMap trust-ca (ca.pem, truststore.p12) through envFrom",
		"container app reads ConfigMap trust-ca (ca.pem) through env",
	}
	if !reflect.DeepEqual(described, want) {
		t.Errorf("readers: %q; want %q", described, want)
	}
	if len(got) == 2 && len(got[1].Sources) != 2 {
		t.Errorf("env of ca.pem reads sources %+v; want ca.pem's two", got[1].Sources)
	}
}
