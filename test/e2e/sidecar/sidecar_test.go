package sidecar

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

var live = map[string]string{"kubernetes.io/cluster-trust-bundle-version": "live"}

// Both modes: the file is exactly the deterministic merge of every selected anchor
// (the union of native and mirror bundles where both are served, plus a ConfigMap),
// and follows edits and deletions.
func TestSidecar_WritesAndFollowsTheMergedFile(t *testing.T) {
	for _, native := range []bool{true, false} {
		t.Run(mode(native), func(t *testing.T) {
			cp := planes.Get(t, native)
			ctx := context.Background()
			primary, mirror := stores(t, cp, native)
			signer := "example.com/" + mode(native)
			a, b, c, d := fixtures.CA("a"), fixtures.CA("b"), fixtures.CA("c"), fixtures.CA("configmap")
			name := strings.ReplaceAll(signer, "/", ":")
			if _, err := primary.Create(ctx, ctb(name+":live", signer, live, a), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if native {
				// A mirror bundle of the same signer joins the union.
				if _, err := mirror.Create(ctx, ctb(name+":mirror", signer, live, b), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "extra-cas"}, Data: map[string]string{"ca.crt": fixtures.Bundle(d)}}
			if _, err := kube(t, cp).CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = kube(t, cp).CoreV1().ConfigMaps(namespace).Delete(ctx, "extra-cas", metav1.DeleteOptions{})
			})

			pod := podFor(t, cp, uniq(t, "merge"))
			s := runSidecar(t, cp, "run", pod, fmt.Sprintf(`[
				{"signerName": %q, "labelSelector": {"matchLabels": {"kubernetes.io/cluster-trust-bundle-version": "live"}}, "path": "ca_certificates.pem"},
				{"configMap": {"name": "extra-cas", "key": "ca.crt"}, "path": "ca_certificates.pem"},
				{"name": %q, "path": "signer-only.pem", "optional": true}]`, signer, name+":live"))

			want := []*fixtures.Cert{a, d}
			if native {
				want = append(want, b)
			}
			s.WaitFor(t, "ca_certificates.pem", merged(want...))
			s.WaitFor(t, "signer-only.pem", merged(a))

			// An edit is reflected.
			got, err := primary.Get(ctx, name+":live")
			if err != nil {
				t.Fatal(err)
			}
			got.Spec.TrustBundle = fixtures.Bundle(a, c)
			if _, err := primary.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			s.WaitFor(t, "ca_certificates.pem", merged(append(want, c)...))

			// The last matching bundle deleted: the required file keeps its last good
			// content and an Event says why; the optional file is emptied. With both
			// APIs served, removing the mirror's bundle first is an ordinary change.
			held := merged(a, c, d)
			if native {
				if err := mirror.Delete(ctx, name+":mirror", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				s.WaitFor(t, "ca_certificates.pem", held)
			}
			if err := primary.Delete(ctx, name+":live", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			s.WaitFor(t, "signer-only.pem", []byte{})
			if got, _ := s.Read("ca_certificates.pem"); string(got) != string(held) {
				t.Errorf("the required file changed after its last bundle was deleted")
			}
			waitForEvent(t, cp, pod, "TrustBundleSyncFailed", fmt.Sprintf("no ClusterTrustBundle for signerName %q matches labelSelector", signer))
		})
	}
}

// waitForEvent waits for an Event with reason on pod whose message contains text.
func waitForEvent(t *testing.T, cp *controlplane.ControlPlane, pod *corev1.Pod, reason, text string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		seen = seen[:0]
		for _, e := range eventsFor(t, cp, pod, reason) {
			seen = append(seen, e.Message)
			if strings.Contains(e.Message, text) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s Event on pod %s containing %q; saw %q", reason, pod.Name, text, seen)
	}
}

// The API server stopped and started again: the sidecar's watches re-establish, and an
// edit made after the restart reaches the file.
func TestSidecar_SurvivesAnAPIServerOutage(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	primary, _ := stores(t, cp, true)
	a, b := fixtures.CA("before outage"), fixtures.CA("after outage")
	if _, err := primary.Create(ctx, ctb("outage-root", "", nil, a), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := runSidecar(t, cp, "run", podFor(t, cp, "outage"), `[{"name": "outage-root", "path": "ca.pem"}]`)
	s.WaitFor(t, "ca.pem", merged(a))

	cp.StopAPIServer()
	// While it is down, something that accepts and at once drops connections holds its
	// address: the sidecar's watches coming back to it (twice, so past a first retry)
	// show it noticed the outage and tried again, which is when a sidecar that let
	// an outage touch the files would have done so.
	down, err := net.Listen("tcp", strings.TrimPrefix(cp.Host, "https://"))
	if err != nil {
		t.Fatalf("cannot hold the API server's address while it is down: %v", err)
	}
	tries := make(chan struct{}, 100)
	go func() {
		for {
			conn, err := down.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
			tries <- struct{}{}
		}
	}()
	for range 2 {
		select {
		case <-tries:
		case <-time.After(time.Minute):
			down.Close()
			t.Fatalf("the sidecar never tried to reach the API server again:\n%s", s.Process.Tail())
		}
	}
	down.Close()
	if got, _ := s.Read("ca.pem"); string(got) != string(merged(a)) {
		t.Fatal("the file changed while the API server was down")
	}
	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	got, err := primary.Get(ctx, "outage-root")
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.TrustBundle = fixtures.Bundle(a, b)
	if _, err := primary.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.WaitFor(t, "ca.pem", merged(a, b))
}

// A TLS Secret's private key never reaches a trust file: init refuses the source whole,
// exits non-zero, and says why in the termination log.
func TestSidecar_InitRefusesATLSSecretHoldingAKey(t *testing.T) {
	cp := planes.Get(t, false)
	ctx := context.Background()
	ca := fixtures.CA("partner")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "partner-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": append(ca.CertPEM(), ca.KeyPEM()...), "tls.key": ca.KeyPEM()}}
	if _, err := kube(t, cp).CoreV1().Secrets(namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := runSidecar(t, cp, "init", podFor(t, cp, "partner"), `[{"secret": {"name": "partner-tls", "key": "tls.crt"}, "path": "partner.pem"}]`)
	err := s.Process.Wait()
	if err == nil {
		t.Fatal("init succeeded with a private key in its source")
	}
	reason, _ := os.ReadFile(s.TerminationLog())
	want := `partner.pem: Secret apps/partner-tls key "tls.crt": PEM block 1 has type "PRIVATE KEY"; only CERTIFICATE blocks are allowed in trust sources, so the whole source was refused`
	if strings.TrimSpace(string(reason)) != want {
		t.Errorf("termination log = %q\nwant %q", reason, want)
	}
	if _, err := s.Read("partner.pem"); !os.IsNotExist(err) {
		t.Error("a file was written from a source holding a key")
	}
}

// init writes the files once and exits 0; probe then passes.
func TestSidecar_InitWritesOnceAndProbePasses(t *testing.T) {
	cp := planes.Get(t, false)
	ctx := context.Background()
	primary, _ := stores(t, cp, false)
	a := fixtures.CA("init")
	if _, err := primary.Create(ctx, ctb("init-root", "", nil, a), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sourcesJSON := `[{"name": "init-root", "path": "ca.pem"}, {"defaultCAs": true, "path": "web.pem"}]`
	s := runSidecar(t, cp, "init", podFor(t, cp, "init"), sourcesJSON)
	if err := s.Process.Wait(); err != nil {
		t.Fatalf("init failed: %v\n%s", err, s.Process.Tail())
	}
	if got, _ := s.Read("ca.pem"); string(got) != string(merged(a)) {
		t.Errorf("ca.pem = %q", got)
	}
	bin, _ := controlplane.BuildBinary("sidecar")
	probe := exec.Command(bin, "probe", contract.Flag(contract.FlagDir, s.Dir), contract.Flag(contract.FlagSources, sourcesJSON))
	if out, err := probe.CombinedOutput(); err != nil {
		t.Errorf("probe after init: %v: %s", err, out)
	}
	probe = exec.Command(bin, "probe", contract.Flag(contract.FlagDir, t.TempDir()), contract.Flag(contract.FlagSources, sourcesJSON))
	if out, err := probe.CombinedOutput(); err == nil || !strings.Contains(string(out), "ca.pem is not written yet") {
		t.Errorf("probe of an empty directory: %v: %s", err, out)
	}
}

// Events are a courtesy: a sidecar whose ServiceAccount may not create them still holds
// files, reports in its log, and writes once the source appears.
func TestSidecar_WorksWithoutEventsPermission(t *testing.T) {
	cp := planes.Get(t, false)
	ctx := context.Background()
	primary, _ := stores(t, cp, false)
	s := runSidecarAs(t, cp, "quiet", "run", podFor(t, cp, "quiet"), `[{"name": "quiet-root", "path": "ca.pem"}]`)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(s.Process.Tail(), `ClusterTrustBundle \"quiet-root\" not found`), nil
	})
	if err != nil {
		t.Fatalf("the missing bundle was not logged:\n%s", s.Process.Tail())
	}
	a := fixtures.CA("quiet")
	if _, err := primary.Create(ctx, ctb("quiet-root", "", nil, a), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.WaitFor(t, "ca.pem", merged(a))
}

// The mirror CRD installed after the sidecar started (trustsync installed into a
// running cluster, say): the sidecar starts watching it at its next discovery, without
// a restart, and the file becomes the union of both kinds.
func TestSidecar_WatchesABundleAPIServedAfterItStarted(t *testing.T) {
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	ctx := context.Background()
	if err := setupIdentities(ctx, cp); err != nil {
		t.Fatal(err)
	}
	native, mirror := stores(t, cp, true)
	a, b := fixtures.CA("native, from the start"), fixtures.CA("mirror, installed later")
	if _, err := native.Create(ctx, ctb("late-root", "", nil, a), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := runSidecar(t, cp, "run", podFor(t, cp, "late"), `[{"name": "late-root", "path": "ca.pem"}]`, contract.Flag(contract.FlagAPIDiscoveryInterval, "1s"))
	s.WaitFor(t, "ca.pem", merged(a))

	if err := cp.InstallMirrorCRD(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := mirror.Create(ctx, ctb("late-root", "", nil, b), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.WaitFor(t, "ca.pem", merged(a, b))

	// The CRD removed: the periodic round never asks about an API it watches; the
	// watch's 404 makes the sidecar rediscover, and the mirror's anchors leave the file.
	if err := cp.UninstallMirrorCRD(ctx); err != nil {
		t.Fatal(err)
	}
	s.WaitFor(t, "ca.pem", merged(a))
}

// A sidecar that cannot obtain its workload certificate says so on its pod, through
// the real API server: its ServiceAccount here may not create CSRs, so the request is
// forbidden. The trust file is written all the same, and no key or certificate
// appears until one is issued.
func TestSidecar_ACertificateItCannotObtainIsAWarningOnThePod(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	primary, _ := stores(t, cp, true)
	a := fixtures.CA("renewal root")
	if _, err := primary.Create(ctx, ctb("renewal-root", "", nil, a), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := podFor(t, cp, "no-csr-rights")
	s := runSidecar(t, cp, "run", pod, `[{"name": "renewal-root", "path": "ca.pem"}]`,
		"--"+contract.FlagCertificate, contract.Flag(contract.FlagServiceAccount, "web"))
	s.WaitFor(t, "ca.pem", merged(a))
	waitForEvent(t, cp, pod, "CertificateRenewalFailed", "Cannot obtain a workload certificate; the app has none yet; retrying: failed to create CertificateSigningRequest")
	for _, e := range eventsFor(t, cp, pod, "CertificateRenewalFailed") {
		if e.Type != corev1.EventTypeWarning || !strings.Contains(e.Message, "forbidden") {
			t.Errorf("event %s %q, want a Warning saying the request was forbidden", e.Type, e.Message)
		}
	}
	for _, name := range []string{v1alpha1.FileCertificate, v1alpha1.FileKey} {
		if got, err := s.Read(name); err == nil {
			t.Errorf("%s holds %d bytes with no certificate issued", name, len(got))
		}
	}
}
