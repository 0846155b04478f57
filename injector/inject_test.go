package injector

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/policy"
)

// A pod from a newer API server can carry fields this build's types do not know. The
// patch must leave every one of them in place: it only adds.
func TestInject_PatchKeepsFieldsNoTypeKnows(t *testing.T) {
	raw := []byte(`{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": {"name": "web", "annotations": {"trustsync.io/inject": "true", "trustsync.io/signer-name": "example.com/s"}},
		"spec": {
			"futurePodField": {"enabled": true},
			"initContainers": [{"name": "setup", "image": "x", "futureContainerField": 7}],
			"containers": [{"name": "app", "image": "y", "futureContainerField": "keep", "env": [{"name": "A", "value": "1"}]}]
		}
	}`)
	pod := &corev1.Pod{}
	if err := json.Unmarshal(raw, pod); err != nil {
		t.Fatal(err)
	}
	res, err := Inject(pod, "apps", nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	patched, err := res.ApplyJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(patched, &got); err != nil {
		t.Fatal(err)
	}
	spec := got["spec"].(map[string]any)
	if spec["futurePodField"] == nil {
		t.Error("spec.futurePodField was dropped")
	}
	inits := spec["initContainers"].([]any)
	if len(inits) != 2 || inits[0].(map[string]any)["name"] != "trustsync" || inits[1].(map[string]any)["futureContainerField"] != float64(7) {
		t.Errorf("initContainers = %v, want the sidecar first and setup's unknown field intact", inits)
	}
	if spec["containers"].([]any)[0].(map[string]any)["futureContainerField"] != "keep" {
		t.Error("the app container's unknown field was dropped")
	}

	// The typed view of the patched JSON is what Apply gives: one behaviour, two forms.
	fromJSON := &corev1.Pod{}
	if err := json.Unmarshal(patched, fromJSON); err != nil {
		t.Fatal(err)
	}
	applied, err := res.Apply(pod)
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(fromJSON, applied) {
		t.Error("ApplyJSON and Apply disagree")
	}
}

func TestInject_RefusalNamesThePodEvenWithGenerateName(t *testing.T) {
	pod := &corev1.Pod{}
	pod.GenerateName = "web-"
	pod.Annotations = map[string]string{v1alpha1.AnnotationInject: "true", AnnotationSignerName: "bad"}
	pod.Spec.Containers = []corev1.Container{{Name: "app"}}
	_, err := Inject(pod, "apps", nil, Config{})
	if err == nil || !strings.HasPrefix(err.Error(), `Pod "web-" is invalid: metadata.annotations[trustsync.io/signer-name]`) {
		t.Errorf("err = %v", err)
	}
}

// FuzzInject feeds arbitrary annotation values to the injector. It must never panic,
// only refuse with a RefusalError or produce an add-only patch that applies and that
// a second admission leaves alone.
func FuzzInject(f *testing.F) {
	keys := []string{AnnotationSignerName, AnnotationBundles, AnnotationLabelSelector, AnnotationPath, AnnotationMountPath, AnnotationContainers, AnnotationSSLCertFile, AnnotationCertificateDNSNames, AnnotationVolumeSize}
	f.Add(0, "example.com/s")
	f.Add(1, `[{"name":"corp","path":"a.pem"},{"defaultCAs":true,"path":"a.pem"}]`)
	f.Add(2, "a in (b,c),!d")
	f.Add(3, "x/../y")
	f.Add(4, "/etc/ssl")
	f.Add(5, "app,,other")
	f.Add(6, "true")
	f.Add(7, "*.a.b,c")
	f.Add(8, "1e3Mi")
	f.Fuzz(func(t *testing.T, which int, value string) {
		if which < 0 {
			which = -which
		}
		pod := &corev1.Pod{}
		pod.Name = "web"
		pod.Annotations = map[string]string{v1alpha1.AnnotationInject: "true", AnnotationSignerName: "example.com/s", AnnotationCertificate: "true"}
		pod.Annotations[keys[which%len(keys)]] = value
		pod.Spec.Containers = []corev1.Container{{Name: "app", Image: "x"}, {Name: "other", Image: "y"}}
		res, err := Inject(pod, "apps", nil, Config{})
		if err != nil {
			if _, ok := err.(*RefusalError); !ok {
				t.Fatalf("error is %T: %v", err, err)
			}
			return
		}
		for _, op := range res.Patch {
			if op.Op != "add" {
				t.Fatalf("non-add operation %q", op.Op)
			}
		}
		injected, err := res.Apply(pod)
		if err != nil {
			t.Fatalf("patch does not apply: %v", err)
		}
		if again, err := Inject(injected, "apps", nil, Config{}); err != nil || again.Skipped != SkipAlreadyInjected {
			t.Fatalf("reinjection = %+v, %v", again, err)
		}
	})
}

// The sidecar warns of expiring anchors within the policy's window, the same one the
// webhook's admission warnings use.
func TestInject_TheSidecarWarnsWithinThePolicysExpiryWindow(t *testing.T) {
	pod := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{v1alpha1.AnnotationInject: "true", AnnotationBundleName: "corp"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
		}
	}
	week, err := policy.Parse([]byte("apiVersion: trustsync.io/v1alpha1\nkind: Policy\nbundles:\n  expiryWarningDays: 7\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		policy *policy.Policy
		want   string // the flag, "" when the sidecar's default (30 days) is the policy's
	}{
		{"no policy file: the default window", nil, ""},
		{"the policy's window", week, "--expiry-warning-days=7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Inject(pod(), "apps", nil, Config{Policy: tc.policy})
			if err != nil {
				t.Fatal(err)
			}
			injected, err := res.Apply(pod())
			if err != nil {
				t.Fatal(err)
			}
			args := strings.Join(injected.Spec.InitContainers[0].Args, " ")
			if got := strings.Contains(args, "--expiry-warning-days"); got != (tc.want != "") || !strings.Contains(args, tc.want) {
				t.Errorf("sidecar args %q, want %q", args, tc.want)
			}
		})
	}
}

// In FIPS 140-3 mode a pod asking for what the mode cannot write is refused at
// admission, on the annotation that asks for it and saying what to ask for instead;
// a PKCS#12 store is written with PBMAC1.
func TestInject_FIPSModeRefusesAtAdmissionWhatItCannotWrite(t *testing.T) {
	was := v1alpha1.FIPSMode
	v1alpha1.FIPSMode = func() bool { return true }
	t.Cleanup(func() { v1alpha1.FIPSMode = was })
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		says        string
	}{
		{"a JKS store", map[string]string{AnnotationFormat: "jks"}, `metadata.annotations[trustsync.io/format]: Invalid value: "jks": FIPS 140-3 mode cannot write a JKS truststore`},
		{"a PKCS#12 store of profile Modern2023", map[string]string{AnnotationFormat: "pkcs12", AnnotationPKCS12Profile: "Modern2023"}, `metadata.annotations[trustsync.io/pkcs12-profile]: Invalid value: "Modern2023": FIPS 140-3 mode cannot write this profile`},
		{"a JKS store in the sources list", map[string]string{AnnotationBundleName: "", AnnotationSources: `[{"name": "corp-roots", "path": "t.jks", "format": "jks"}]`}, `FIPS 140-3 mode cannot write a JKS truststore`},
		{"a PKCS#12 store without a profile is admitted", map[string]string{AnnotationFormat: "pkcs12"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{}
			pod.Name = "web"
			pod.Annotations = map[string]string{v1alpha1.AnnotationInject: "true", AnnotationBundleName: "corp-roots"}
			for k, v := range tc.annotations {
				if v == "" {
					delete(pod.Annotations, k)
					continue
				}
				pod.Annotations[k] = v
			}
			pod.Spec.Containers = []corev1.Container{{Name: "app", Image: "x"}}
			_, err := Inject(pod, "apps", nil, Config{})
			switch {
			case tc.says == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
				t.Fatalf("Inject = %v, want a refusal saying %q", err, tc.says)
			}
		})
	}
}
