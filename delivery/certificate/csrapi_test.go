package certificate

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/trustsync/trustsync/delivery/kubeclient"
)

// csrServer answers GETs of one CSR with answer(n), n counting from 1; it serves
// nothing else, so a list or a watch (which the sidecar may not make) fails the test.
func csrServer(t *testing.T, name string, answer func(n int32) (int, *certificatesv1.CertificateSigningRequest)) (restCSRs, *atomic.Int32) {
	t.Helper()
	var gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/apis/certificates.k8s.io/v1/certificatesigningrequests/"+name {
			t.Errorf("unexpected request %s %s?%s: the sidecar reads its request by name only", r.Method, r.URL.Path, r.URL.RawQuery)
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		code, csr := answer(gets.Add(1))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if csr != nil {
			_ = json.NewEncoder(w).Encode(csr)
		} else {
			_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: int32(code), Reason: metav1.StatusReason(http.StatusText(code))})
		}
	}))
	t.Cleanup(srv.Close)
	c, err := kubeclient.CSRs(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return restCSRs{c: c, poll: time.Millisecond, pollCap: 4 * time.Millisecond}, &gets
}

func pendingCSR(name string) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{TypeMeta: metav1.TypeMeta{Kind: "CertificateSigningRequest", APIVersion: "certificates.k8s.io/v1"}, ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func TestRestCSRs_WaitDoneReadsItsRequestByNameUntilAnswered(t *testing.T) {
	const name = "trustsync-web-0123456789abcdef"
	t.Run("pending, an outage, then issued: the issued request", func(t *testing.T) {
		api, gets := csrServer(t, name, func(n int32) (int, *certificatesv1.CertificateSigningRequest) {
			switch {
			case n < 3:
				return http.StatusOK, pendingCSR(name)
			case n < 6:
				return http.StatusServiceUnavailable, nil
			}
			csr := pendingCSR(name)
			csr.Status.Certificate = []byte("issued")
			return http.StatusOK, csr
		})
		got, err := api.waitDone(context.Background(), name)
		if err != nil || string(got.Status.Certificate) != "issued" || gets.Load() != 6 {
			t.Fatalf("waitDone = %v, %v after %d reads; want the issued request on the 6th", got, err, gets.Load())
		}
	})
	t.Run("denied: the denied request", func(t *testing.T) {
		api, _ := csrServer(t, name, func(int32) (int, *certificatesv1.CertificateSigningRequest) {
			return http.StatusOK, deny(pendingCSR(name))
		})
		got, err := api.waitDone(context.Background(), name)
		if err != nil || refusal(got) == "" {
			t.Fatalf("waitDone = %+v, %v; want the denial", got, err)
		}
	})
	t.Run("deleted before it was answered: an error saying so", func(t *testing.T) {
		api, _ := csrServer(t, name, func(int32) (int, *certificatesv1.CertificateSigningRequest) { return http.StatusNotFound, nil })
		_, err := api.waitDone(context.Background(), name)
		if err == nil || !strings.Contains(err.Error(), "deleted before it was answered") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no right to read it: an error naming the right, not an endless wait", func(t *testing.T) {
		api, _ := csrServer(t, name, func(int32) (int, *certificatesv1.CertificateSigningRequest) { return http.StatusForbidden, nil })
		_, err := api.waitDone(context.Background(), name)
		if err == nil || !strings.Contains(err.Error(), "needs get on certificatesigningrequests") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("the caller giving up ends the wait", func(t *testing.T) {
		api, _ := csrServer(t, name, func(int32) (int, *certificatesv1.CertificateSigningRequest) { return http.StatusOK, pendingCSR(name) })
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := api.waitDone(ctx, name); err == nil {
			t.Fatal("waitDone returned no error for a cancelled wait")
		}
	})
}
