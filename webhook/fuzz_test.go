package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/utils/ptr"
)

// FuzzAdmissionReview feeds arbitrary bodies to every admission route, /mutate/pods
// included. Whatever comes
// in, the server must answer (never panic), and an HTTP 200 must carry a response to
// the review it was given.
func FuzzAdmissionReview(f *testing.F) {
	seeds := [][]byte{
		{},
		[]byte("{}"),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x"}}`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","object":{"spec":7}}}`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x","operation":"UPDATE","object":{},"oldObject":null}}`),
	}
	for _, r := range []request{
		mirrorReq(admissionv1.Create, "alice", ctbObject(mirrorAPIVersion, "example.com--s--live", "example.com/s", anchor), nil),
		mirrorReq(admissionv1.Update, "alice", ctbObject(mirrorAPIVersion, "corp", "", expired), ctbObject(mirrorAPIVersion, "corp", "", anchor)),
		nativeReq(ctbObject("certificates.k8s.io/v1", "corp", "", expiringSoon)),
		csrReq(routeValidateCSR, csrObject("example.com/clamped", ptr.To[int32](86400), nil)),
		csrReq(routeMutateCSR, csrObject("example.com/clamped", nil, map[string]string{"experimental.cert-manager.io/request-duration": "1h"})),
		podReq("apps", map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "corp", "trustsync.io/certificate": "true"}),
		podReq("apps", map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundles": `[{"name": "a", "path": "certs"}, {"name": "b", "path": "certs/b.pem"}]`}),
		podReq("apps", map[string]string{"trustsync.io/inject": "true", "trustsync.io/signer-name": "example.com/s", "trustsync.io/mount-path": "/etc"}),
	} {
		seeds = append(seeds, reviewBody(f, r))
	}
	for _, s := range seeds {
		for _, route := range []string{routeBundles, routeValidateCSR, routeMutateCSR, routeMutatePods} {
			f.Add(route, s)
		}
	}
	s := newTestServer(f, csrPolicy, &fakeAuthorizer{grants: map[string][]string{"alice": {"example.com/s"}}})
	f.Fuzz(func(t *testing.T, route string, body []byte) {
		switch route {
		case routeBundles, routeValidateCSR, routeMutateCSR, routeMutatePods:
		default:
			route = routeBundles
		}
		rec := httptest.NewRecorder()
		s.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, route, bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			return
		}
		in, out := &admissionv1.AdmissionReview{}, &admissionv1.AdmissionReview{}
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("HTTP 200 with a body that is not an AdmissionReview: %q", rec.Body.String())
		}
		if json.Unmarshal(body, in) == nil && in.Request != nil && out.Response != nil && out.Response.UID != in.Request.UID {
			t.Fatalf("response UID %q does not answer request UID %q", out.Response.UID, in.Request.UID)
		}
	})
}
