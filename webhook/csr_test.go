package webhook

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

const csrPolicy = `apiVersion: trustsync.io/v1alpha1
kind: Policy
signers:
- signerName: example.com/clamped
  minExpirationSeconds: 1800
  maxExpirationSeconds: 3600
  defaultExpirationSeconds: 2400
- signerName: example.com/rejected
  maxExpirationSeconds: 3600
  overMaximum: Reject
`

func csrObject(signer string, seconds *int32, annotations map[string]string) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{
		TypeMeta:   metav1.TypeMeta{APIVersion: "certificates.k8s.io/v1", Kind: "CertificateSigningRequest"},
		ObjectMeta: metav1.ObjectMeta{Name: "req", Annotations: annotations},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			SignerName: signer, ExpirationSeconds: seconds, Request: []byte("-----BEGIN CERTIFICATE REQUEST-----"),
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature},
		},
	}
}

func csrReq(path string, obj runtime.Object) request {
	return request{path: path, op: admissionv1.Create, group: "certificates.k8s.io", version: "v1", kind: "CertificateSigningRequest", resource: "certificatesigningrequests", object: obj}
}

func TestCSRAdmission_Validate(t *testing.T) {
	annotated := func(v string) map[string]string {
		return map[string]string{"experimental.cert-manager.io/request-duration": v}
	}
	tests := []struct {
		name        string
		csr         *certificatesv1.CertificateSigningRequest
		wantMessage string
	}{
		{name: "a request within bounds is allowed", csr: csrObject("example.com/clamped", ptr.To[int32](3000), nil)},
		{name: "no duration is allowed: the default applies", csr: csrObject("example.com/clamped", nil, nil)},
		{name: "a signer without rules is not judged", csr: csrObject("example.com/unruled", ptr.To[int32](10), nil)},
		{
			name:        "under 600 seconds is refused with upstream's message",
			csr:         csrObject("example.com/rejected", nil, annotated("5m")),
			wantMessage: `CertificateSigningRequest.certificates.k8s.io "req" is invalid: metadata.annotations[experimental.cert-manager.io/request-duration]: Invalid value: "5m": may not specify a duration less than 600 seconds (10 minutes)`,
		},
		{
			name:        "under the signer's minimum is refused",
			csr:         csrObject("example.com/clamped", ptr.To[int32](1200), nil),
			wantMessage: `CertificateSigningRequest.certificates.k8s.io "req" is invalid: spec.expirationSeconds: Invalid value: 1200: requested duration 20m0s is below the minimum 30m0s that policy sets for signer "example.com/clamped"; ask for at least 1800 seconds`,
		},
		{
			name:        "over the maximum is refused under Reject",
			csr:         csrObject("example.com/rejected", ptr.To[int32](7200), nil),
			wantMessage: `CertificateSigningRequest.certificates.k8s.io "req" is invalid: spec.expirationSeconds: Invalid value: 7200: requested duration 2h0m0s exceeds the maximum 1h0m0s that policy sets for signer "example.com/rejected"; ask for at most 3600 seconds`,
		},
		{
			name:        "the annotation counts before expirationSeconds",
			csr:         csrObject("example.com/rejected", ptr.To[int32](900), annotated("2h")),
			wantMessage: `CertificateSigningRequest.certificates.k8s.io "req" is invalid: metadata.annotations[experimental.cert-manager.io/request-duration]: Invalid value: "2h": requested duration 2h0m0s exceeds the maximum 1h0m0s that policy sets for signer "example.com/rejected"; ask for at most 3600 seconds`,
		},
		{
			name:        "a malformed annotation is refused naming it",
			csr:         csrObject("example.com/clamped", nil, annotated("forever")),
			wantMessage: `CertificateSigningRequest.certificates.k8s.io "req" is invalid: metadata.annotations[experimental.cert-manager.io/request-duration]: Invalid value: "forever": annotation experimental.cert-manager.io/request-duration has value "forever", which is not a positive Go duration; use a value such as "24h" or "2160h"`,
		},
		{
			name:        "over the maximum under Clamp is refused if it was not clamped",
			csr:         csrObject("example.com/clamped", ptr.To[int32](7200), nil),
			wantMessage: `CertificateSigningRequest.certificates.k8s.io "req" is invalid: spec.expirationSeconds: Invalid value: 7200: requested duration 2h0m0s exceeds the maximum 1h0m0s that policy sets for signer "example.com/clamped", and trustsync's mutating webhook did not clamp it; check that its MutatingWebhookConfiguration is installed`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, csrPolicy, nil)
			resp := s.review(t, csrReq(routeValidateCSR, tc.csr))
			if resp.Allowed != (tc.wantMessage == "") {
				t.Fatalf("allowed = %v (%v)", resp.Allowed, resp.Result)
			}
			if tc.wantMessage != "" && resp.Result.Message != tc.wantMessage {
				t.Errorf("message =\n  %s\nwant\n  %s", resp.Result.Message, tc.wantMessage)
			}
		})
	}
}

// patchOp is one JSON patch operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

func TestCSRAdmission_Mutate(t *testing.T) {
	annotated := map[string]string{"experimental.cert-manager.io/request-duration": "8760h", "keep": "me"}
	tests := []struct {
		name         string
		csr          *certificatesv1.CertificateSigningRequest
		wantPatch    []patchOp
		wantWarnings []string
	}{
		{name: "a request within bounds is left alone", csr: csrObject("example.com/clamped", ptr.To[int32](3000), nil)},
		{name: "a signer without rules is left alone", csr: csrObject("example.com/unruled", nil, nil)},
		{name: "Reject leaves refusal to the validating route", csr: csrObject("example.com/rejected", ptr.To[int32](7200), nil)},
		{
			name:      "no duration gets the signer's default",
			csr:       csrObject("example.com/clamped", nil, nil),
			wantPatch: []patchOp{{Op: "add", Path: "/spec/expirationSeconds", Value: float64(2400)}},
		},
		{
			name:         "over the maximum is clamped with a warning saying from what to what",
			csr:          csrObject("example.com/clamped", ptr.To[int32](86400), nil),
			wantPatch:    []patchOp{{Op: "replace", Path: "/spec/expirationSeconds", Value: float64(3600)}},
			wantWarnings: []string{`requested duration 24h0m0s exceeds the maximum that policy sets for signer "example.com/clamped"; spec.expirationSeconds set to 3600 (1h0m0s)`},
		},
		{
			name: "an annotation asking for more is dropped with the clamp, so the two never disagree",
			csr:  csrObject("example.com/clamped", nil, annotated),
			wantPatch: []patchOp{
				{Op: "remove", Path: "/metadata/annotations/experimental.cert-manager.io~1request-duration"},
				{Op: "add", Path: "/spec/expirationSeconds", Value: float64(3600)},
			},
			wantWarnings: []string{`requested duration 8760h0m0s exceeds the maximum that policy sets for signer "example.com/clamped"; spec.expirationSeconds set to 3600 (1h0m0s)`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, csrPolicy, nil)
			resp := s.review(t, csrReq(routeMutateCSR, tc.csr))
			if !resp.Allowed {
				t.Fatalf("a mutating route refused: %v", resp.Result)
			}
			var got []patchOp
			if len(resp.Patch) > 0 {
				if err := json.Unmarshal(resp.Patch, &got); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) == 0 {
				got = nil // an empty patch and no patch both change nothing
			}
			// The patch is a diff the admission library computes over maps, so its order
			// varies; operations on distinct paths commute, so compare them in path order.
			byPath := func(a, b patchOp) int { return strings.Compare(a.Path, b.Path) }
			slices.SortFunc(got, byPath)
			slices.SortFunc(tc.wantPatch, byPath)
			if !jsonEqual(t, got, tc.wantPatch) {
				t.Errorf("patch = %s, want %v", resp.Patch, tc.wantPatch)
			}
			if !jsonEqual(t, resp.Warnings, tc.wantWarnings) {
				t.Errorf("warnings = %q, want %q", resp.Warnings, tc.wantWarnings)
			}
		})
	}
}

// A field the compiled types do not know (from a newer API server, say) must survive:
// the patch touches only what the rules change.
func TestCSRAdmission_MutatePreservesUnknownFields(t *testing.T) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(csrObject("example.com/clamped", ptr.To[int32](86400), nil))
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(u, "from-the-future", "spec", "someNewField")
	s := newTestServer(t, csrPolicy, nil)
	resp := s.review(t, csrReq(routeMutateCSR, &unstructured.Unstructured{Object: u}))
	var got []patchOp
	if err := json.Unmarshal(resp.Patch, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Path != "/spec/expirationSeconds" {
		t.Errorf("patch = %s, want only the expirationSeconds replacement", resp.Patch)
	}
}

func TestCSRAdmission_DurationMetrics(t *testing.T) {
	s := newTestServer(t, csrPolicy, nil)
	s.review(t, csrReq(routeMutateCSR, csrObject("example.com/clamped", ptr.To[int32](3000), nil)))
	s.review(t, csrReq(routeMutateCSR, csrObject("example.com/clamped", ptr.To[int32](86400), nil)))
	s.review(t, csrReq(routeMutateCSR, csrObject("example.com/clamped", nil, nil)))
	signer := map[string]string{"signer": "example.com/clamped"}
	if got := s.counter(t, "trustsync_webhook_csr_requested_duration_seconds_total", signer); got != 2 {
		t.Errorf("requested = %v, want 2 (the defaulted one asked for nothing)", got)
	}
	if got := s.counter(t, "trustsync_webhook_csr_honored_duration_seconds_total", signer); got != 1 {
		t.Errorf("honored = %v, want 1 (the clamped one was not)", got)
	}
	if got := s.counter(t, "trustsync_webhook_admission_requests_total", map[string]string{"route": routeMutateCSR, "outcome": "clamped"}); got != 1 {
		t.Errorf("clamped outcome = %v, want 1", got)
	}
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}

// At -v=2 every denial is logged, as docs/operations.md says, CSR denials included:
// an operator reading the log sees which request was refused and why.
func TestCSRAdmission_DenialsAreLoggedAtV2(t *testing.T) {
	var buf bytes.Buffer
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", "2")
	_ = fs.Set("logtostderr", "false")
	klog.SetOutput(&buf)
	t.Cleanup(func() {
		_ = fs.Set("v", "0")
		_ = fs.Set("logtostderr", "true")
		klog.SetOutput(os.Stderr)
	})
	s := newTestServer(t, csrPolicy, nil)
	if resp := s.review(t, csrReq(routeValidateCSR, csrObject("example.com/rejected", ptr.To[int32](7200), nil))); resp.Allowed {
		t.Fatal("the over-long request was allowed")
	}
	klog.Flush()
	if got := buf.String(); !strings.Contains(got, `"Denied CertificateSigningRequest"`) || !strings.Contains(got, `signerName="example.com/rejected"`) || !strings.Contains(got, "exceeds the maximum") {
		t.Errorf("the denial was not logged with its signer and reason; log:\n%s", got)
	}
}
