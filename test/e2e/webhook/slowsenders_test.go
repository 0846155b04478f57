package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/trustsync/trustsync/test/controlplane"
)

// A tenant who can reach the webhook's port opens 50 connections that each declare an
// admission review of 6,000,000 bytes and send one byte every 100 ms. Meanwhile pods
// that ask for trust are still created through the API server, injected: the slow
// senders hold only the bytes they sent. (Before bodies were charged as they arrived,
// three such connections held the whole budget and every pod creation failed when
// the API server gave up on the webhook.)
func TestWebhook_SlowSendersDoNotStopAdmission(t *testing.T) {
	cp, w := env(t, true)
	ctx := controlplane.Context(t)
	if err := cp.CreateNamespace(ctx, "slow-senders", nil); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(w.CA.Cert)
	const senders = 50
	for range senders {
		conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(w.Port), &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		if _, err := fmt.Fprintf(conn, "POST /mutate/pods HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: 6000000\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				if _, err := conn.Write([]byte("x")); err != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	// Every sender is being received: each has had its first bytes charged.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return w.metric(t, "trustsync_webhook_arriving_review_bytes", nil) >= senders, nil
	}); err != nil {
		t.Fatalf("the webhook is not receiving the %d slow senders: %v", senders, err)
	}

	pods := kube(t, cp).CoreV1().Pods("slow-senders")
	for i := range 3 {
		start := time.Now()
		created, err := pods.Create(ctx, restrictedPod("web-"+strconv.Itoa(i), map[string]string{"trustsync.io/inject": "true", "trustsync.io/bundle-name": "corp-roots"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a pod asking for trust, while %d slow senders trickle: %v", senders, err)
		}
		if created.Annotations["trustsync.io/status"] == "" || len(created.Spec.InitContainers) == 0 {
			t.Fatalf("the pod was admitted without injection: %+v", created.Annotations)
		}
		t.Logf("pod %d created and injected in %s while %d slow senders trickle", i, time.Since(start), senders)
	}
}
