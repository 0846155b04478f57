package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	kwhmodel "github.com/slok/kubewebhook/v2/pkg/model"
	kwhwebhook "github.com/slok/kubewebhook/v2/pkg/webhook"
	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// reviewHandler carries admission reviews between HTTP and a kubewebhook Webhook: it
// decodes the AdmissionReview (v1, or v1beta1 from old API servers), hands kubewebhook's
// model of it to the webhook, and encodes the answer as the API server expects.
//
// It replaces kubewebhook's own HTTP handler, which everything else of kubewebhook
// (webhooks, validators, mutators, the measured webhook) is still used through, for
// two reasons: that handler decodes every review twice (a universal deserializer
// first decodes the whole body to sniff its kind, then decodes it again into the
// typed review), which was a quarter to a third of /mutate/pods' handler CPU (docs/benchmarks.md); and it
// panics on a review without a request, which anything that reaches the port can send.
type reviewHandler struct {
	webhook kwhwebhook.Webhook
}

var (
	v1ReviewType      = metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"}
	v1beta1ReviewType = metav1.TypeMeta{APIVersion: admissionv1beta1.SchemeGroupVersion.String(), Kind: "AdmissionReview"}
)

func (h reviewHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, err := readBody(r)
	if err != nil {
		http.Error(w, fmt.Sprintf("could not read the admission review: %v", err), http.StatusBadRequest)
		return
	}
	if len(body) == 0 {
		http.Error(w, "no body found: POST an AdmissionReview", http.StatusBadRequest)
		return
	}
	review, err := decodeReview(body)
	if err != nil {
		klog.V(2).InfoS("Refused a malformed admission review", "path", r.URL.Path, "err", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := h.webhook.Review(r.Context(), review)
	if err != nil {
		klog.ErrorS(err, "Admission review failed", "webhook", h.webhook.ID(), "uid", review.ID, "namespace", review.Namespace, "name", review.Name)
		writeReview(w, http.StatusInternalServerError, review, &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: err.Error(), Status: metav1.StatusFailure}})
		return
	}
	out, err := responseFor(resp)
	if err != nil {
		klog.ErrorS(err, "Cannot answer admission review", "webhook", h.webhook.ID(), "uid", review.ID)
		writeReview(w, http.StatusInternalServerError, review, &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: err.Error(), Status: metav1.StatusFailure}})
		return
	}
	writeReview(w, http.StatusOK, review, out)
	klog.V(4).InfoS("Admission review handled", "webhook", h.webhook.ID(), "uid", review.ID, "operation", review.Operation,
		"namespace", review.Namespace, "name", review.Name, "dryRun", review.DryRun, "duration", time.Since(start))
}

// readBody returns the review the body budget read whole, or else reads it into one
// buffer of its declared size (the budget has refused sizes over MaxReviewBytes),
// sparing io.ReadAll's growth by doubling.
func readBody(r *http.Request) ([]byte, error) {
	if b, ok := r.Body.(*receivedBody); ok {
		return b.data, nil
	}
	if r.ContentLength <= 0 || r.ContentLength > MaxReviewBytes {
		return io.ReadAll(r.Body)
	}
	body := make([]byte, r.ContentLength)
	_, err := io.ReadFull(r.Body, body)
	return body, err
}

// decodeReview decodes body once into kubewebhook's model of the review. It uses the
// JSON v2 decoder (go-json-experiment/json, what Go ships as encoding/json/v2 behind
// GOEXPERIMENT=jsonv2 until its release): it validates and decodes in one pass and
// allocates far less, which took /mutate/pods from 0.45 to 0.56 of the no-op floor
// (docs/benchmarks.md); and its names are case-sensitive and unique, as in the JSON
// the API server writes.
func decodeReview(body []byte) (kwhmodel.AdmissionReview, error) {
	var v1 admissionv1.AdmissionReview
	if err := jsonv2.Unmarshal(body, &v1); err != nil {
		return kwhmodel.AdmissionReview{}, fmt.Errorf("could not decode the admission review: %w", err)
	}
	switch v1.TypeMeta {
	case v1ReviewType:
		if v1.Request == nil {
			return kwhmodel.AdmissionReview{}, errNoRequest
		}
		return kwhmodel.NewAdmissionReviewV1(&v1), nil
	case v1beta1ReviewType:
		// API servers before 1.16 only: the same JSON, decoded again into its own type.
		var beta admissionv1beta1.AdmissionReview
		if err := jsonv2.Unmarshal(body, &beta); err != nil {
			return kwhmodel.AdmissionReview{}, fmt.Errorf("could not decode the admission review: %w", err)
		}
		if beta.Request == nil {
			return kwhmodel.AdmissionReview{}, errNoRequest
		}
		return kwhmodel.NewAdmissionReviewV1Beta1(&beta), nil
	}
	return kwhmodel.AdmissionReview{}, fmt.Errorf("could not decode the admission review: apiVersion %q, kind %q; want an AdmissionReview of admission.k8s.io/v1 (or v1beta1)", v1.APIVersion, v1.Kind)
}

var errNoRequest = fmt.Errorf(`malformed AdmissionReview (is "request" missing?): an AdmissionReview sent to a webhook carries the request under review`)

// responseFor is the webhook's answer as the API server reads it. A refusal carries
// HTTP 400 in its status, as kube-apiserver's own admission refusals do.
func responseFor(resp kwhmodel.AdmissionResponse) (*admissionv1.AdmissionResponse, error) {
	switch r := resp.(type) {
	case *kwhmodel.ValidatingAdmissionResponse:
		out := &admissionv1.AdmissionResponse{Allowed: r.Allowed, Warnings: r.Warnings}
		if !r.Allowed {
			out.Result = &metav1.Status{Message: r.Message, Status: metav1.StatusFailure, Code: http.StatusBadRequest}
		}
		return out, nil
	case *kwhmodel.MutatingAdmissionResponse:
		patchType := admissionv1.PatchTypeJSONPatch
		return &admissionv1.AdmissionResponse{Allowed: true, PatchType: &patchType, Patch: r.JSONPatchPatch, Warnings: r.Warnings}, nil
	}
	return nil, fmt.Errorf("the webhook answered with a %T, which is neither a validating nor a mutating response", resp)
}

// writeReview writes out, for the review's request, in the review's own version.
func writeReview(w http.ResponseWriter, status int, review kwhmodel.AdmissionReview, out *admissionv1.AdmissionResponse) {
	out.UID = types.UID(review.ID)
	var body any = admissionv1.AdmissionReview{TypeMeta: v1ReviewType, Response: out}
	if review.Version == kwhmodel.AdmissionReviewVersionV1beta1 {
		var patchType *admissionv1beta1.PatchType
		if out.PatchType != nil {
			patchType = ptr.To(admissionv1beta1.PatchType(*out.PatchType))
		}
		// v1beta1 predates warnings; they are dropped, as kubewebhook did.
		body = admissionv1beta1.AdmissionReview{TypeMeta: v1beta1ReviewType, Response: &admissionv1beta1.AdmissionResponse{
			UID: out.UID, Allowed: out.Allowed, Result: out.Result, Patch: out.Patch, PatchType: patchType,
		}}
	}
	// Encoded by encoding/json, whose omitempty the API types' tags were written for.
	data, err := json.Marshal(body)
	if err != nil {
		http.Error(w, fmt.Sprintf("could not encode the admission response: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}
