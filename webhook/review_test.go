package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trustsync/trustsync/policy"
)

var testNow = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// fakeAuthorizer grants attest on the signer names (or "<domain>/*" forms) listed for
// a user; errFor makes every check for that user fail.
type fakeAuthorizer struct {
	grants map[string][]string
	errFor string
	calls  []string
}

func (f *fakeAuthorizer) Authorize(_ context.Context, user authenticationv1.UserInfo, verb, signerName string) (bool, error) {
	f.calls = append(f.calls, user.Username+" "+verb+" "+signerName)
	if user.Username == f.errFor {
		return false, errors.New("authorizer unavailable")
	}
	for _, g := range f.grants[user.Username] {
		if g == signerName && verb == "attest" {
			return true, nil
		}
	}
	return false, nil
}

type testServer struct {
	handler  http.Handler
	registry *prometheus.Registry
	authz    *fakeAuthorizer
}

func newTestServer(t testing.TB, policyYAML string, authz *fakeAuthorizer) *testServer {
	t.Helper()
	pol, err := policy.Parse([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	if authz == nil {
		authz = &fakeAuthorizer{}
	}
	reg := prometheus.NewRegistry()
	h, err := NewHandler(Config{Policy: pol, Authorizer: authz, Clock: clocktesting.NewFakePassiveClock(testNow), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return &testServer{handler: h, registry: reg, authz: authz}
}

// request describes one admission request.
type request struct {
	path      string
	op        admissionv1.Operation
	group     string
	version   string
	kind      string
	resource  string
	user      string
	namespace string
	object    runtime.Object
	oldObject runtime.Object
}

func (s *testServer) review(t testing.TB, r request) *admissionv1.AdmissionResponse {
	t.Helper()
	body := reviewBody(t, r)
	rec := httptest.NewRecorder()
	s.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, r.path, bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("%s answered HTTP %d: %s", r.path, rec.Code, rec.Body.String())
	}
	out := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
		t.Fatal(err)
	}
	if out.Response == nil || out.Response.UID != "review-1" {
		t.Fatalf("response does not answer the request: %s", rec.Body.String())
	}
	return out.Response
}

func reviewBody(t testing.TB, r request) []byte {
	t.Helper()
	raw := func(o runtime.Object) runtime.RawExtension {
		if o == nil {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	if r.op == "" {
		r.op = admissionv1.Create
	}
	if r.user == "" {
		r.user = "alice"
	}
	ar := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("review-1"),
			Kind:      metav1.GroupVersionKind{Group: r.group, Version: r.version, Kind: r.kind},
			Resource:  metav1.GroupVersionResource{Group: r.group, Version: r.version, Resource: r.resource},
			Operation: r.op,
			Namespace: r.namespace,
			UserInfo:  authenticationv1.UserInfo{Username: r.user, Groups: []string{"system:authenticated"}},
			Object:    raw(r.object),
			OldObject: raw(r.oldObject),
		},
	}
	b, err := json.Marshal(ar)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// counter returns a metric's value for the given labels, or 0.
func (s *testServer) counter(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := s.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
