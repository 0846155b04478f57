package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/test/controlplane"
)

// restrictedPod is a pod that Pod Security "restricted" admits as written.
func restrictedPod(name string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.example/app:1",
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
}

func kube(t *testing.T, cp *controlplane.ControlPlane) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var askForTrust = map[string]string{"trustsync.io/inject": "true", "trustsync.io/signer-name": "example.com/server-tls"}

func TestInjector(t *testing.T) {
	cp, w := env(t, true)
	ctx := controlplane.Context(t)
	if err := cp.CreateNamespace(ctx, "restricted-apps", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}); err != nil {
		t.Fatal(err)
	}
	pods := kube(t, cp).CoreV1().Pods("restricted-apps")

	t.Run("an annotated pod passes restricted Pod Security with the sidecar injected", func(t *testing.T) {
		got, err := pods.Create(ctx, restrictedPod("trusting", askForTrust), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the injected pod was refused: %v", err)
		}
		if len(got.Spec.InitContainers) != 1 {
			t.Fatalf("initContainers = %d, want the sidecar", len(got.Spec.InitContainers))
		}
		sidecar := got.Spec.InitContainers[0]
		if sidecar.Name != "trustsync" || sidecar.RestartPolicy == nil || *sidecar.RestartPolicy != corev1.ContainerRestartPolicyAlways || sidecar.StartupProbe == nil {
			t.Errorf("sidecar = %+v, want a native sidecar with a startup probe", sidecar)
		}
		if sc := sidecar.SecurityContext; sc == nil || *sc.RunAsUser != 1000 {
			t.Errorf("sidecar does not run as the app's uid: %+v", sc)
		}
		if len(got.Spec.Volumes) == 0 || got.Spec.Volumes[len(got.Spec.Volumes)-1].EmptyDir == nil || got.Spec.Volumes[len(got.Spec.Volumes)-1].EmptyDir.Medium != corev1.StorageMediumMemory {
			t.Errorf("volumes = %+v, want the memory-backed emptyDir", got.Spec.Volumes)
		}
		mounts := got.Spec.Containers[0].VolumeMounts
		if len(mounts) == 0 || mounts[len(mounts)-1].MountPath != "/var/run/trust-anchors" || !mounts[len(mounts)-1].ReadOnly {
			t.Errorf("app mounts = %+v, want the volume read-only at /var/run/trust-anchors", mounts)
		}
		if got.Annotations["trustsync.io/status"] == "" {
			t.Error("no status annotation")
		}

		// The stored pod sent again as a new review yields no patch.
		resp := w.review(t, got)
		var ops []map[string]any
		if err := json.Unmarshal(resp.Patch, &ops); err != nil || !resp.Allowed || len(ops) > 0 {
			t.Errorf("reviewing the injected pod again: allowed %v, patch %s (%v); want no operations", resp.Allowed, resp.Patch, err)
		}
	})

	t.Run("an unannotated pod is stored as sent and never reaches the webhook", func(t *testing.T) {
		before := w.metric(t, "trustsync_webhook_admission_requests_total", map[string]string{"route": "/mutate/pods"})
		got, err := pods.Create(ctx, restrictedPod("plain", nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The ServiceAccount plugin adds its token volume; trustsync adds nothing.
		if len(got.Spec.InitContainers) != 0 || got.Annotations["trustsync.io/status"] != "" {
			t.Errorf("an unannotated pod was injected: %+v", got.Spec.InitContainers)
		}
		for _, v := range got.Spec.Volumes {
			if strings.HasPrefix(v.Name, "trustsync") {
				t.Errorf("an unannotated pod got volume %q", v.Name)
			}
		}
		if after := w.metric(t, "trustsync_webhook_admission_requests_total", map[string]string{"route": "/mutate/pods"}); after != before {
			t.Errorf("the webhook saw %v pod reviews for an unannotated pod", after-before)
		}
	})

	t.Run("a bad annotation is denied with its message", func(t *testing.T) {
		_, err := pods.Create(ctx, restrictedPod("bad", map[string]string{"trustsync.io/inject": "true", "trustsync.io/signer-name": "server-tls"}), metav1.CreateOptions{})
		wantErrContaining(t, err, `admission webhook "pods.trustsync.io" denied the request: Pod "bad" is invalid: metadata.annotations[trustsync.io/signer-name]: Invalid value: "server-tls": must be a fully qualified domain and path of the form 'example.com/signer-name'`)
	})

	t.Run("a pod in kube-system is not injected", func(t *testing.T) {
		if err := cp.CreateNamespace(ctx, "kube-system", nil); err != nil {
			t.Fatal(err)
		}
		got, err := kube(t, cp).CoreV1().Pods("kube-system").Create(ctx, restrictedPod("system", askForTrust), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Spec.InitContainers) != 0 {
			t.Error("a kube-system pod was injected")
		}
	})
}

// review sends pod to /mutate/pods directly, as the API server would, and returns the
// response.
func (w *webhookServer) review(t *testing.T, pod *corev1.Pod) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "again", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: pod.Namespace, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := w.Client().Post(w.URL("/mutate/pods"), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d", resp.StatusCode)
	}
	out := &admissionv1.AdmissionReview{}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
	if out.Response == nil || !strings.EqualFold(string(out.Response.UID), "again") {
		t.Fatalf("response = %+v", out.Response)
	}
	return out.Response
}

// Delivery native through the real API server: the pod is stored with Kubernetes'
// projected volume and no sidecar, and everything native volumes cannot do is refused
// with the annotation and the reason.
func TestInjector_DeliveryNative(t *testing.T) {
	cp, _ := env(t, true)
	ctx := controlplane.Context(t)
	if err := cp.CreateNamespace(ctx, "native-apps", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}); err != nil {
		t.Fatal(err)
	}
	pods := kube(t, cp).CoreV1().Pods("native-apps")
	native := func(extra map[string]string) map[string]string {
		a := map[string]string{"trustsync.io/inject": "true", "trustsync.io/delivery": "native"}
		for k, v := range extra {
			a[k] = v
		}
		return a
	}

	t.Run("the key types a podCertificate volume takes and the sidecar does not are stored", func(t *testing.T) {
		for _, keyType := range []string{"ECDSAP521", "RSA4096"} {
			got, err := pods.Create(ctx, restrictedPod("native-"+strings.ToLower(keyType), native(map[string]string{
				"trustsync.io/certificate": "true", "trustsync.io/certificate-key-type": keyType,
			})), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("%s refused: %v", keyType, err)
			}
			for _, v := range got.Spec.Volumes {
				if v.Projected != nil && len(v.Projected.Sources) == 1 && v.Projected.Sources[0].PodCertificate != nil && v.Projected.Sources[0].PodCertificate.KeyType != keyType {
					t.Errorf("stored keyType %q, want %q", v.Projected.Sources[0].PodCertificate.KeyType, keyType)
				}
			}
		}
	})

	t.Run("a bundle and a certificate become one projected volume, with no sidecar", func(t *testing.T) {
		got, err := pods.Create(ctx, restrictedPod("native", native(map[string]string{
			"trustsync.io/bundle-name": "corp-roots", "trustsync.io/certificate": "true", "trustsync.io/ssl-cert-file": "true",
		})), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		if len(got.Spec.InitContainers) != 0 || len(got.Spec.Containers) != 1 {
			t.Fatalf("containers were added: init %d, app %d", len(got.Spec.InitContainers), len(got.Spec.Containers))
		}
		var projected *corev1.ProjectedVolumeSource
		for _, v := range got.Spec.Volumes {
			if v.Name == "trustsync-anchors" {
				projected = v.Projected
			}
		}
		if projected == nil || len(projected.Sources) != 2 || projected.Sources[0].ClusterTrustBundle == nil || projected.Sources[1].PodCertificate == nil {
			t.Fatalf("volume trustsync-anchors = %+v, want a projected clusterTrustBundle and podCertificate", projected)
		}
		// user is kept only where the API server enables AtomicWriteVolumeUserFields
		// (alpha in 1.37); otherwise it drops the field and the kubelet's defaults apply.
		if pc := projected.Sources[1].PodCertificate; pc.KeyPath != "tls.key" || pc.CertificateChainPath != "tls.crt" || (pc.User != nil && *pc.User != 1000) {
			t.Errorf("podCertificate = %+v, want tls.key and tls.crt, owned by the app's uid 1000 if at all", pc)
		}
	})
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        string
	}{
		{"two sources merged into one path", map[string]string{"trustsync.io/bundles": `[{"name":"a","path":"ca.pem"},{"name":"b","path":"ca.pem"}]`},
			`with trustsync.io/delivery: native, 2 sources write "ca.pem", and merging them into one file is the sidecar's`},
		{"a Secret source", map[string]string{"trustsync.io/bundles": `[{"secret":{"name":"corp","key":"ca.crt"},"path":"corp.pem"}]`},
			`with trustsync.io/delivery: native, the ConfigMap or Secret source for "corp.pem" is read by the sidecar alone`},
		{"the public roots", map[string]string{"trustsync.io/bundles": `[{"defaultCAs":true,"path":"public.pem"}]`},
			`with trustsync.io/delivery: native, the public roots for "public.pem" are added by the sidecar alone`},
		{"a sidecar setting", map[string]string{"trustsync.io/bundle-name": "corp-roots", "trustsync.io/sidecar-memory-limit": "128Mi"},
			`metadata.annotations[trustsync.io/sidecar-memory-limit]: Invalid value: "128Mi": with trustsync.io/delivery: native, there is no sidecar for it to configure`},
		{"a key type only the sidecar makes", map[string]string{"trustsync.io/certificate": "true", "trustsync.io/certificate-key-type": "RSA2048"},
			`metadata.annotations[trustsync.io/certificate-key-type]: Invalid value: "RSA2048": with trustsync.io/delivery: native, a podCertificate volume takes ECDSAP256`},
		{"a key type only the kubelet makes, with the sidecar", map[string]string{"trustsync.io/delivery": "sidecar", "trustsync.io/certificate": "true", "trustsync.io/certificate-key-type": "ECDSAP521"},
			`metadata.annotations[trustsync.io/certificate-key-type]: Invalid value: "ECDSAP521": with trustsync.io/delivery: sidecar, the sidecar generates ECDSAP256, ECDSAP384, RSA2048, RSA3072, ED25519; ECDSAP521 is a podCertificate volume's alone`},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			_, err := pods.Create(ctx, restrictedPod("refused", native(tc.annotations)), metav1.CreateOptions{})
			wantErrContaining(t, err, tc.want)
		})
	}
}

// Reloads and truststores through the real API server: a pod asking for a reload
// signal is stored with its process namespace shared and the marker on the signalled
// container alone; each bad value is refused with the annotation and the reason.
// withholdToken in a case's annotations stands for automountServiceAccountToken: false.
const withholdToken = "test/withhold-token"

func TestInjector_ReloadsAndTruststores(t *testing.T) {
	cp, _ := env(t, true)
	ctx := controlplane.Context(t)
	if err := cp.CreateNamespace(ctx, "reload-apps", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}); err != nil {
		t.Fatal(err)
	}
	pods := kube(t, cp).CoreV1().Pods("reload-apps")
	with := func(extra map[string]string) map[string]string {
		a := map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "corp-roots"}
		for k, v := range extra {
			a[k] = v
		}
		return a
	}

	t.Run("a reload signal shares the process namespace and marks the app container", func(t *testing.T) {
		got, err := pods.Create(ctx, restrictedPod("signalled", with(map[string]string{
			"trustsync.io/reload-signal": "SIGHUP", "trustsync.io/reload-url": "http://127.0.0.1:8080/-/reload",
			"trustsync.io/format": "pkcs12", "trustsync.io/path": "truststore.p12", "trustsync.io/password-secret": "store-pass/password",
		})), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.ShareProcessNamespace == nil || !*got.Spec.ShareProcessNamespace {
			t.Error("the stored pod does not share its process namespace")
		}
		marked := false
		for _, m := range got.Spec.Containers[0].VolumeMounts {
			marked = marked || m.MountPath == "/var/run/trustsync-reload-target"
		}
		if !marked {
			t.Errorf("the app container has no reload marker: %+v", got.Spec.Containers[0].VolumeMounts)
		}
		args := strings.Join(got.Spec.InitContainers[0].Args, " ")
		for _, want := range []string{"--reload-signal=SIGHUP", "--reload-container=app", "--reload-url=http://127.0.0.1:8080/-/reload", `"format":"pkcs12"`, `"passwordSecret":{"name":"store-pass","key":"password"}`} {
			if !strings.Contains(args, want) {
				t.Errorf("sidecar args %q lack %q", args, want)
			}
		}
	})
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        string
	}{
		{"a reload URL off the pod", map[string]string{"trustsync.io/reload-url": "http://10.0.0.5/reload"},
			`metadata.annotations[trustsync.io/reload-url]: Invalid value: "http://10.0.0.5/reload": must be on the pod's loopback (host 127.0.0.1 or localhost), not "10.0.0.5"`},
		{"a signal that stops apps", map[string]string{"trustsync.io/reload-signal": "SIGKILL"},
			`metadata.annotations[trustsync.io/reload-signal]: Unsupported value: "SIGKILL": supported values: "SIGHUP", "SIGUSR1", "SIGUSR2"`},
		{"a signal where the pod withholds its token", map[string]string{"trustsync.io/reload-signal": "SIGHUP", withholdToken: "true"},
			`metadata.annotations[trustsync.io/reload-signal]: Invalid value: "SIGHUP": the pod sets automountServiceAccountToken: false, so the sidecar alone holds a token, and a signal needs the app to share the sidecar's process namespace and user, which would let the app read that token through /proc; use trustsync.io/reload-url`},
		{"a signalled container that is not the pod's", map[string]string{"trustsync.io/reload-signal": "SIGHUP", "trustsync.io/reload-container": "nginx"},
			`metadata.annotations[trustsync.io/reload-container]: Invalid value: "nginx": names no app container of this pod; it has: app`},
		{"an unknown format", map[string]string{"trustsync.io/format": "p12"},
			`metadata.annotations[trustsync.io/format]: Unsupported value: "p12": supported values: "pem", "pkcs12", "jks"`},
		{"a password Secret without its key", map[string]string{"trustsync.io/format": "jks", "trustsync.io/password-secret": "store-pass"},
			`metadata.annotations[trustsync.io/password-secret]: Invalid value: "store-pass": must be <secret name>/<key>`},
		{"items sharing a path in two formats", map[string]string{"trustsync.io/bundles": `[{"name":"a","path":"t"},{"name":"b","path":"t","format":"jks"}]`},
			`item 0 writes "t" as pem; items sharing a path must agree on its format`},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			annotations := with(tc.annotations)
			if _, ok := tc.annotations["trustsync.io/bundles"]; ok {
				delete(annotations, "trustsync.io/bundle-name")
			}
			pod := restrictedPod("refused", annotations)
			if _, ok := annotations[withholdToken]; ok {
				delete(annotations, withholdToken)
				pod.Spec.AutomountServiceAccountToken = ptr.To(false)
			}
			_, err := pods.Create(ctx, pod, metav1.CreateOptions{})
			wantErrContaining(t, err, tc.want)
		})
	}
}

// Delivery node through the real API server: with the node agent's CSIDriver (the
// chart installed it) the pod is stored with the agent's inline volume and no sidecar;
// a reload signal is refused, naming the annotation; with the CSIDriver gone, the
// webhook notices and refuses delivery node, saying why.
func TestInjector_DeliveryNode(t *testing.T) {
	cp, _ := env(t, true)
	ctx := controlplane.Context(t)
	if err := cp.CreateNamespace(ctx, "node-apps", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}); err != nil {
		t.Fatal(err)
	}
	pods := kube(t, cp).CoreV1().Pods("node-apps")
	node := func(extra map[string]string) map[string]string {
		a := map[string]string{"trustsync.io/inject": "true", "trustsync.io/delivery": "node", "trustsync.io/bundle-name": "corp-roots"}
		maps.Copy(a, extra)
		return a
	}
	got, err := pods.Create(ctx, restrictedPod("node", node(nil)), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	if len(got.Spec.InitContainers) != 0 || len(got.Spec.Containers) != 1 {
		t.Fatalf("containers were added: init %d, app %d", len(got.Spec.InitContainers), len(got.Spec.Containers))
	}
	var csiVolume *corev1.CSIVolumeSource
	for _, v := range got.Spec.Volumes {
		if v.Name == "trustsync-anchors" {
			csiVolume = v.CSI
		}
	}
	if csiVolume == nil || csiVolume.Driver != "csi.trustsync.io" || !strings.Contains(csiVolume.VolumeAttributes["sources"], `"corp-roots"`) {
		t.Fatalf("volume trustsync-anchors = %+v, want the agent's CSI volume carrying the sources", csiVolume)
	}
	_, err = pods.Create(ctx, restrictedPod("signal", node(map[string]string{"trustsync.io/reload-signal": "SIGHUP"})), metav1.CreateOptions{})
	wantErrContaining(t, err, `metadata.annotations[trustsync.io/reload-signal]: Invalid value: "SIGHUP": with trustsync.io/delivery: node, the node agent cannot signal a container`)

	drivers := kube(t, cp).StorageV1().CSIDrivers()
	installed, err := drivers.Get(ctx, "csi.trustsync.io", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := drivers.Delete(ctx, installed.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		restored := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: installed.Name, Labels: installed.Labels}, Spec: installed.Spec}
		if _, err := drivers.Create(context.Background(), restored, metav1.CreateOptions{}); err != nil {
			t.Errorf("restore the CSIDriver: %v", err)
		}
	})
	const want = `with trustsync.io/delivery: node, the node agent's CSIDriver csi.trustsync.io is not installed`
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := pods.Create(ctx, restrictedPod("no-agent", node(nil)), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), want), nil
	})
	if err != nil {
		t.Fatalf("with the CSIDriver deleted, delivery node was not refused with %q", want)
	}
}
