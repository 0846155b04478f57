package signer

import (
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/test/poll"
	"github.com/trustsync/trustsync/test/scrape"
)

// The signer times its own share of each issuance, from the request first seen to its
// certificate written, by kind: a CSR it approves itself and a PodCertificateRequest
// (where served) are each counted once, a denied request not at all, and a request
// decided no longer counts as waiting.
func TestSigner_TimesItsOwnShareOfEachIssuedRequestByKind(t *testing.T) {
	cp := planes.Get(t, true)
	signer := signers[cp]
	client := kube(t, cp.AdminConfig())
	scrapeSigner := func() scrape.Metrics {
		t.Helper()
		text, err := signer.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		m, err := scrape.Parse(text)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	const name = "trustsync_signer_request_duration_seconds"
	kinds := []string{"CertificateSigningRequest"}
	pcrs := servesPodCertificateRequests(t, client)
	if pcrs {
		kinds = append(kinds, "PodCertificateRequest")
	}
	before := scrapeSigner()

	waitDone(t, cp, requestAs(t, cp, "web", workload, ptr.To[int32](900), []string{spiffe(appNamespace, "web")}).Name)
	waitDone(t, cp, requestAs(t, cp, "web", workload, nil, []string{spiffe("payments", "web")}).Name) // denied
	if pcrs {
		node, sa, pod := boundPod(t, client, "latency")
		issued := createPCR(t, client, node, sa, pod, "latency-issued", nil)
		denied := createPCR(t, client, node, sa, pod, "latency-denied", map[string]string{"trustsync.io/dns-names": "web.other.svc"})
		for _, pcr := range []string{issued.Name, denied.Name} {
			waitDecided(t, client.CertificatesV1().PodCertificateRequests(appNamespace), pcr)
		}
	}

	after := scrapeSigner()
	for _, kind := range kinds {
		labels := map[string]string{"signer": workload, "kind": kind}
		d := after.Histogram(name, labels).Since(before.Histogram(name, labels))
		if d.Count() != 1 {
			t.Errorf("%s{kind=%q} counted %d requests, want the one issued (the denied one is no issuance)", name, kind, d.Count())
		}
	}
	// The signer's own writes come back as events, which it takes in and lets go.
	poll.True(t, 30*time.Second, "no request waiting once every one is decided", func() bool {
		return scrapeSigner().Sum("trustsync_signer_requests_waiting", nil) == 0
	})
}
