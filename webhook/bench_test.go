package webhook

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/trustsync/trustsync/test/fixtures"
)

// BenchmarkValidateBundle measures one mirror bundle review end to end through the
// handler: decode the AdmissionReview, apply every upstream rule, the attest check (a
// fake authorizer: the real one is a round trip to the API server), expiry warnings,
// and encode the response. The bundle holds three anchors, a typical signer bundle
// during a rotation.
func BenchmarkValidateBundle(b *testing.B) {
	anchors := []*fixtures.Cert{fixtures.CA("a"), fixtures.CA("b"), fixtures.CA("c")}
	obj := ctbObject(mirrorAPIVersion, "example.com--s--live", "example.com/s", anchors...)
	body := reviewBody(b, mirrorReq(admissionv1.Create, "alice", obj, nil))
	s := newTestServer(b, "", &fakeAuthorizer{grants: map[string][]string{"alice": {"example.com/s"}}})
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		rec := httptest.NewRecorder()
		s.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, routeBundles, bytes.NewReader(body)))
		if rec.Code != http.StatusOK || !bytes.Contains(rec.Body.Bytes(), []byte(`"allowed":true`)) {
			b.Fatalf("HTTP %d: %s", rec.Code, rec.Body.String())
		}
		s.authz.calls = s.authz.calls[:0]
	}
}
