package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/policy"
	"github.com/trustsync/trustsync/tenancy"
)

func podServer(t testing.TB, namespaces NamespaceAnnotations) *testServer {
	t.Helper()
	return enforcingPodServer(t, namespaces, nil, nil)
}

// enforcingPodServer serves pods with trustsync-system as the release namespace, and
// tenancy enforced through grants where given.
func enforcingPodServer(t testing.TB, namespaces NamespaceAnnotations, grants tenancy.Lookup, bundles tenancy.BundleLookup) *testServer {
	t.Helper()
	pol, _ := policy.Parse(nil)
	reg := prometheus.NewRegistry()
	h, err := NewHandler(Config{Policy: pol, Authorizer: &fakeAuthorizer{}, Clock: clocktesting.NewFakePassiveClock(testNow), Registry: reg,
		Injector: injector.Config{Namespace: "trustsync-system"}, Namespaces: namespaces, Grants: grants, Bundles: bundles})
	if err != nil {
		t.Fatal(err)
	}
	return &testServer{handler: h, registry: reg}
}

func podReq(namespace string, annotations map[string]string) request {
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	// Pods under review carry no namespace of their own; the request names it.
	pod.Namespace = ""
	return request{path: routeMutatePods, op: admissionv1.Create, version: "v1", kind: "Pod", resource: "pods", namespace: namespace, object: pod}
}

func TestPodAdmission(t *testing.T) {
	nsDefaults := func(_ context.Context, ns string) (map[string]string, error) {
		if ns == "defaulted" {
			return map[string]string{injector.AnnotationSignerName: "example.com/from-namespace"}, nil
		}
		if ns == "unreadable" {
			return nil, errors.New("namespaces is forbidden")
		}
		return nil, nil
	}
	ask := map[string]string{v1alpha1.AnnotationInject: "true", injector.AnnotationSignerName: "example.com/s"}
	tests := []struct {
		name         string
		req          request
		wantAllowed  bool
		wantPatch    string // a substring of the patch; "" means no patch
		wantMessage  string
		wantWarnings string
	}{
		{name: "an annotated pod is injected", req: podReq("apps", ask), wantAllowed: true, wantPatch: `"path":"/spec/initContainers"`},
		{name: "an unannotated pod gets no patch", req: podReq("apps", nil), wantAllowed: true},
		{name: "kube-system is never injected", req: podReq("kube-system", ask), wantAllowed: true},
		{
			name: "namespace annotations are defaults", wantAllowed: true, wantPatch: `example.com/from-namespace`,
			req: podReq("defaulted", map[string]string{v1alpha1.AnnotationInject: "true"}),
		},
		{
			name: "unreadable namespace defaults inject with a warning", wantAllowed: true, wantPatch: `"path":"/spec/initContainers"`,
			req: podReq("unreadable", ask), wantWarnings: `trustsync could not read namespace "unreadable"'s default annotations`,
		},
		{
			name:        "a bad annotation is denied with the annotation, value and rule",
			req:         podReq("apps", map[string]string{v1alpha1.AnnotationInject: "true", injector.AnnotationSignerName: "no-slash"}),
			wantMessage: `Pod "web" is invalid: metadata.annotations[trustsync.io/signer-name]: Invalid value: "no-slash": must be a fully qualified domain and path of the form 'example.com/signer-name'`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := podServer(t, nsDefaults)
			resp := s.review(t, tc.req)
			if resp.Allowed != tc.wantAllowed {
				t.Fatalf("allowed = %v (%v)", resp.Allowed, resp.Result)
			}
			if tc.wantMessage != "" && resp.Result.Message != tc.wantMessage {
				t.Errorf("message =\n  %s\nwant\n  %s", resp.Result.Message, tc.wantMessage)
			}
			var ops []map[string]any
			if len(resp.Patch) > 0 {
				if err := json.Unmarshal(resp.Patch, &ops); err != nil {
					t.Fatalf("patch %s is not JSON: %v", resp.Patch, err)
				}
			}
			if got := string(resp.Patch); (tc.wantPatch == "") != (len(ops) == 0) || !strings.Contains(got, tc.wantPatch) {
				t.Errorf("patch = %s, want it to contain %q", got, tc.wantPatch)
			}
			if !strings.Contains(strings.Join(resp.Warnings, "\n"), tc.wantWarnings) {
				t.Errorf("warnings = %q, want %q", resp.Warnings, tc.wantWarnings)
			}
		})
	}
}
