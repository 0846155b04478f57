package signer

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/signer"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/doccmd"
	"github.com/trustsync/trustsync/test/keyscan"
	"github.com/trustsync/trustsync/test/localkms"
	"github.com/trustsync/trustsync/test/poll"
	"github.com/trustsync/trustsync/test/scrape"
	"github.com/trustsync/trustsync/test/softhsm"
)

// keeperSigner is a signer whose CA keys a real keeper holds: a SoftHSM2 token
// (trustsync-signer-pkcs11) or a local KMS (trustsync-signer), in a namespace of its
// own (its Lease and CA Secret apart from the suite's signer).
type keeperSigner struct {
	keeper
	name, namespace string
	process         *controlplane.Process
}

// keeper is one real keeper, made for a test.
type keeper struct {
	kind string
	// keyRef names key name in it; away and back take it away (a token pulled, a KMS
	// stopped) and bring it back with its keys; start runs the signer that can use it.
	keyRef     func(name string) string
	away, back func() error
	start      func(cp *controlplane.ControlPlane, args ...string) (*controlplane.Process, error)
	// holds says whether the keeper holds the private key of pub, asked of the keeper
	// itself (an auditor's tools), and if not, why.
	holds func(t testing.TB, pub crypto.PublicKey) (bool, string)
}

// keepers are the real keepers the signer is tried with, each test against each.
var keepers = []struct {
	kind string
	make func(t testing.TB) keeper
}{
	{"pkcs11", func(t testing.TB) keeper {
		tok := tokenAsTheDocsMakeIt(t)
		return keeper{kind: "pkcs11", keyRef: tok.KeyRef, away: tok.Pull, back: tok.Put,
			start: (*controlplane.ControlPlane).StartSignerPKCS11,
			holds: func(t testing.TB, pub crypto.PublicKey) (bool, string) {
				keys, err := tok.Keys()
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range keys {
					if keyscan.EqualKeys(k.Public, pub) {
						return !k.Extractable && k.Sensitive && strings.HasPrefix(k.Label, "ca"), fmt.Sprintf("%+v", k)
					}
				}
				return false, "no such key in the token"
			}}
	}},
	{"awskms", func(t testing.TB) keeper {
		kms := localkms.Start(t)
		return keeper{kind: "awskms", keyRef: kms.KeyRef, away: func() error { kms.Stop(); return nil }, back: kms.Start,
			start: (*controlplane.ControlPlane).StartSigner,
			holds: func(t testing.TB, pub crypto.PublicKey) (bool, string) {
				keys, err := kms.PublicKeys(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range keys {
					if keyscan.EqualKeys(k, pub) {
						return true, ""
					}
				}
				return false, "no such key in the KMS"
			}}
	}},
}

// tokenAsTheDocsMakeIt makes a SoftHSM2 token by running docs/signer.md's commands as
// written, in a directory of the test's.
func tokenAsTheDocsMakeIt(t testing.TB) *softhsm.Token {
	t.Helper()
	commands, err := doccmd.Block("../../../docs/signer.md", "Try it first with SoftHSM2")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sh := exec.Command("bash", "-euo", "pipefail", "-c", strings.Join(commands, "\n"))
	sh.Dir = dir
	sh.Env = append(os.Environ(), "PIN="+softhsm.PIN, "SO_PIN="+softhsm.SOPIN)
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("docs/signer.md's SoftHSM2 commands: %v\n%s", err, out)
	}
	tok, err := softhsm.At(dir, "trustsync")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOFTHSM2_CONF", tok.Conf)
	return tok
}

// eachKeeper runs test against a signer of each keeper.
func eachKeeper(t *testing.T, cp *controlplane.ControlPlane, prefix string, test func(t *testing.T, s *keeperSigner)) {
	for _, k := range keepers {
		t.Run(k.kind, func(t *testing.T) {
			test(t, startKeeperSigner(t, cp, k.make(t), prefix+"-"+k.kind, "example.com/"+prefix+"-"+k.kind, true))
		})
	}
}

// keeperRuns numbers the keeper signers this test process started.
var keeperRuns atomic.Int32

// startKeeperSigner runs the signer that k needs for signerName, its keys in k, in
// namespace; with approve, it approves its ServiceAccounts' requests itself.
func startKeeperSigner(t testing.TB, cp *controlplane.ControlPlane, k keeper, namespace, signerName string, approve bool, extra ...string) *keeperSigner {
	t.Helper()
	// A namespace of its own each time (a test or benchmark run again with -count
	// makes a new keeper, which holds none of the keys an earlier run's CA Secret
	// names: the signer would rightly refuse that Secret).
	namespace += "-" + strconv.Itoa(int(keeperRuns.Add(1)))
	file := filepath.Join(t.TempDir(), "policy.yaml")
	doc := fmt.Sprintf("apiVersion: trustsync.io/v1alpha1\nkind: Policy\nsigners:\n- signerName: %s\n  keyRef: %q\n", signerName, k.keyRef("ca"))
	if approve {
		doc += "  approval: {}\n"
	}
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cp.CreateNamespace(context.Background(), namespace, nil); err != nil {
		t.Fatal(err)
	}
	p, err := k.start(cp, append([]string{"--namespace=" + namespace, "--policy=" + file, "--ca-propagation=timed", "--ca-propagation-window=" + window.String()}, extra...)...)
	untilTheEnd(t, "signer with "+k.kind, p, err)
	return &keeperSigner{keeper: k, name: signerName, namespace: namespace, process: p}
}

// secret is the signer's CA Secret.
func (s *keeperSigner) secret(t *testing.T, client kubernetes.Interface) *corev1.Secret {
	t.Helper()
	secret, err := client.CoreV1().Secrets(s.namespace).Get(context.Background(), "trustsync-ca-"+strings.ReplaceAll(s.name, "/", "-"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// Each keeper end to end: the signer makes its CA key in the keeper and signs CSRs and
// PodCertificateRequests through it; a forced rotation makes the next key there; and
// no private key of any CA is anywhere in the cluster: not in a Secret or ConfigMap,
// not in etcd (public keys compared, names not trusted).
func TestKeeper_SignsAndRotatesInsideTheKeeperAndNoCAKeyReachesTheCluster(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	eachKeeper(t, cp, "keys", func(t *testing.T, ks *keeperSigner) {
		first := leaf(t, waitDone(t, cp, requestAs(t, cp, "web", ks.name, nil, []string{spiffe(appNamespace, "web")}, "web.apps.svc").Name))
		secret := ks.secret(t, client)
		caCert := parseCert(t, secret.Data[corev1.TLSCertKey])
		if err := first.CheckSignatureFrom(caCert); err != nil {
			t.Fatalf("the certificate is not signed by the CA of the Secret: %v", err)
		}
		if _, ok := secret.Data[corev1.TLSPrivateKeyKey]; ok || secret.Type != signer.SecretTypeKeeperCA || !strings.HasPrefix(secret.Annotations[signer.AnnotationKey], ks.kind+":") {
			t.Errorf("the CA Secret (type %s) has tls.key of %d bytes and records its key at %q; want type %s, no tls.key and the key's place in the keeper", secret.Type, len(secret.Data[corev1.TLSPrivateKeyKey]), secret.Annotations[signer.AnnotationKey], signer.SecretTypeKeeperCA)
		}
		if ok, why := ks.holds(t, caCert.PublicKey); !ok {
			t.Fatalf("the keeper's key for the CA: %s", why)
		}

		if servesPodCertificateRequests(t, client) {
			node, sa, pod := boundPod(t, client, "keys-"+ks.kind)
			pcr := createPCRFor(t, client, ks.name, node, sa, pod, "keys-"+ks.kind, nil)
			pcr = waitDecided(t, client.CertificatesV1().PodCertificateRequests(appNamespace), pcr.Name)
			if c := pcr.Status.Conditions[0]; c.Type != "Issued" {
				t.Fatalf("the PodCertificateRequest ended %s/%s: %s", c.Type, c.Reason, c.Message)
			}
			if err := parseCert(t, []byte(pcr.Status.CertificateChain)).CheckSignatureFrom(caCert); err != nil {
				t.Errorf("the pod certificate is not signed by the keeper's CA: %v", err)
			}
		}

		// A forced rotation: the next CA's key is made in the keeper, then it signs.
		secret.Annotations[signer.AnnotationRotateRequested] = time.Now().UTC().Format(time.RFC3339Nano)
		if _, err := client.CoreV1().Secrets(ks.namespace).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		var next *x509.Certificate
		poll.Eventually(t, time.Minute, "the next CA's key recorded", func() (bool, string) {
			s := ks.secret(t, client)
			if s.Annotations[signer.AnnotationNextKey] == "" {
				return false, "no next key recorded yet"
			}
			next = parseCert(t, s.Data["next.crt"])
			return true, ""
		})
		if ok, why := ks.holds(t, next.PublicKey); !ok {
			t.Fatalf("the keeper's key for the next CA: %s", why)
		}
		// The live bundle's rotation status (what kubectl trustsync rotation prints)
		// says where each CA's key lives, by name only.
		poll.Eventually(t, 30*time.Second, "the rotation status naming both keys", func() (bool, string) {
			live, err := liveStore(t, cp, true).Get(ctx, strings.ReplaceAll(ks.name, "/", ":")+":live")
			if err != nil {
				return false, err.Error()
			}
			var st bundle.RotationStatus
			if err := json.Unmarshal([]byte(live.Annotations[bundle.RotationAnnotation]), &st); err != nil {
				return false, err.Error()
			}
			s := ks.secret(t, client)
			return st.CurrentKey == s.Annotations[signer.AnnotationKey] && st.NewKey == s.Annotations[signer.AnnotationNextKey], fmt.Sprintf("status keys %q, %q", st.CurrentKey, st.NewKey)
		})
		poll.Eventually(t, time.Minute, "a certificate of the next CA", func() (bool, string) {
			got := leaf(t, waitDone(t, cp, requestAs(t, cp, "web", ks.name, nil, []string{spiffe(appNamespace, "web")}, "web.apps.svc").Name))
			return got.CheckSignatureFrom(next) == nil, "still signed by the old CA"
		})

		// Every CA this signer ever had: the current, the retired, any next.
		var cas []*x509.Certificate
		s := ks.secret(t, client)
		for _, key := range []string{corev1.TLSCertKey, "next.crt", "retired.crt"} {
			certs, _ := bundle.ParseCertificates(s.Data[key])
			cas = append(cas, certs...)
		}
		if len(cas) < 2 {
			t.Fatalf("the Secret names %d CAs after a rotation, want the new and the retired", len(cas))
		}
		storage, err := keyscan.Storage(ctx, client, cp.EtcdURL())
		if err != nil {
			t.Fatal(err)
		}
		for _, found := range keyscan.Holding(storage, cas) {
			t.Error(found)
		}
	})
}

// Each keeper taken away mid-run (a token pulled, a KMS stopped): a CSR and a
// PodCertificateRequest wait, saying why, and nothing is signed; the keeper back,
// both are issued within 30 seconds.
func TestKeeper_FailsClosedWhileTheKeeperIsAwayAndSignsWithin30sOfItsReturn(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kube(t, cp.AdminConfig())
	eachKeeper(t, cp, "outage", func(t *testing.T, ks *keeperSigner) {
		waitDone(t, cp, requestAs(t, cp, "web", ks.name, nil, []string{spiffe(appNamespace, "web")}, "web.apps.svc").Name)
		if v := keyAvailable(t, ks); v != 1 {
			t.Fatalf("before the keeper goes trustsync_signer_key_available is %v, want 1", v)
		}
		if err := ks.away(); err != nil {
			t.Fatal(err)
		}
		csr := requestAs(t, cp, "web", ks.name, nil, []string{spiffe(appNamespace, "web")}, "web.apps.svc")
		pcrs := servesPodCertificateRequests(t, client)
		var pcr *certificatesv1.PodCertificateRequest
		if pcrs {
			node, sa, pod := boundPod(t, client, "outage-"+ks.kind)
			pcr = createPCRFor(t, client, ks.name, node, sa, pod, "outage-"+ks.kind, nil)
		}
		csrs := client.CertificatesV1().CertificateSigningRequests()
		poll.Eventually(t, time.Minute, "the CSR waiting for the keeper", func() (bool, string) {
			got, err := csrs.Get(ctx, csr.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			c := condition(got, v1alpha1.ConditionWaiting)
			if c == nil || c.Status != corev1.ConditionTrue {
				return false, fmt.Sprintf("conditions %+v", got.Status.Conditions)
			}
			if c.Reason != v1alpha1.ReasonKeyUnavailable || !strings.Contains(c.Message, "cannot sign") {
				t.Fatalf("the CSR waits with %s: %s; want KeyUnavailable naming the keeper", c.Reason, c.Message)
			}
			return true, ""
		})
		waitEventFor(t, client, csr.Name, v1alpha1.ReasonKeyUnavailable)
		if pcrs {
			waitEventFor(t, client, pcr.Name, v1alpha1.ReasonKeyUnavailable)
		}
		poll.Eventually(t, 30*time.Second, "trustsync_signer_key_available 0", func() (bool, string) {
			v := keyAvailable(t, ks)
			return v == 0, fmt.Sprintf("trustsync_signer_key_available is %v", v)
		})
		// Two more attempts of each kind, each finding the keeper away, and still
		// nothing signed: the signer counts every attempt that waited.
		kinds := []string{"CertificateSigningRequest"}
		if pcrs {
			kinds = append(kinds, "PodCertificateRequest")
		}
		before := map[string]float64{}
		for _, kind := range kinds {
			before[kind] = keeperWaits(t, ks, kind)
		}
		for _, kind := range kinds {
			poll.Eventually(t, time.Minute, "two more "+kind+" attempts waiting for the keeper", func() (bool, string) {
				n := keeperWaits(t, ks, kind)
				return n >= before[kind]+2, fmt.Sprintf("%v attempts waited, %v before", n, before[kind])
			})
		}
		if got, _ := csrs.Get(ctx, csr.Name, metav1.GetOptions{}); len(got.Status.Certificate) > 0 || condition(got, certificatesv1.CertificateFailed) != nil {
			t.Fatalf("while the keeper was away the CSR got a certificate or failed: %+v", got.Status.Conditions)
		}
		if pcrs {
			if got, _ := client.CertificatesV1().PodCertificateRequests(appNamespace).Get(ctx, pcr.Name, metav1.GetOptions{}); len(got.Status.Conditions) > 0 {
				t.Fatalf("while the keeper was away the PodCertificateRequest was decided: %+v", got.Status.Conditions)
			}
		}

		if err := ks.back(); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		poll.Eventually(t, 30*time.Second, "the CSR issued within 30 s of the keeper's return", func() (bool, string) {
			got, err := csrs.Get(ctx, csr.Name, metav1.GetOptions{})
			if err != nil || len(got.Status.Certificate) == 0 {
				return false, "the CSR is not issued yet"
			}
			if c := condition(got, v1alpha1.ConditionWaiting); c == nil || c.Status != corev1.ConditionFalse || c.Reason != v1alpha1.ReasonIssued {
				t.Errorf("once issued the CSR's Waiting condition is %+v, want False/Issued", c)
			}
			return true, ""
		})
		if pcrs {
			poll.Eventually(t, 30*time.Second-time.Since(back), "the PodCertificateRequest issued within 30 s of the keeper's return", func() (bool, string) {
				got, err := client.CertificatesV1().PodCertificateRequests(appNamespace).Get(ctx, pcr.Name, metav1.GetOptions{})
				if err != nil || len(got.Status.Conditions) == 0 {
					return false, "the PodCertificateRequest is not decided yet"
				}
				if c := got.Status.Conditions[0]; c.Type != "Issued" {
					t.Fatalf("the PodCertificateRequest ended %s/%s: %s", c.Type, c.Reason, c.Message)
				}
				return true, ""
			})
		}
		poll.Eventually(t, 30*time.Second, "trustsync_signer_key_available 1", func() (bool, string) {
			v := keyAvailable(t, ks)
			return v == 1, fmt.Sprintf("trustsync_signer_key_available is %v", v)
		})
		t.Logf("issued %s after the keeper came back", time.Since(back).Round(100*time.Millisecond))
	})
}

// A keyRef the signer cannot open stops it at its start, naming the keyRef; the
// static signer, which cannot load a PKCS#11 module, says which build can.
func TestKeeper_AKeyRefThatCannotBeOpenedStopsTheSignerNamingIt(t *testing.T) {
	cp := planes.Get(t, true)
	tok := softhsm.New(t, "trustsync")
	localkms.Credentials(t)
	for _, tc := range []struct {
		name, keyRef string
		pkcs11       bool
		says         []string
	}{
		{"a token that does not exist", strings.Replace(tok.KeyRef("ca"), "token=trustsync", "token=absent", 1), true, []string{"keyRef pkcs11:token=absent;object=ca", "could not find PKCS#11 token"}},
		{"a PKCS#11 keyRef given to the static signer", tok.KeyRef("ca"), false, []string{"built without PKCS#11", "trustsync-signer-pkcs11"}},
		{"a KMS that does not answer", "awskms:key-id=alias/ca;region=eu-west-1;endpoint=http://127.0.0.1:1", false, []string{"keyRef awskms:key-id=alias/ca", "127.0.0.1:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "policy.yaml")
			if err := os.WriteFile(file, fmt.Appendf(nil, "apiVersion: trustsync.io/v1alpha1\nkind: Policy\nsigners:\n- signerName: example.com/refused\n  keyRef: %q\n", tc.keyRef), 0o600); err != nil {
				t.Fatal(err)
			}
			start := cp.StartSigner
			if tc.pkcs11 {
				start = cp.StartSignerPKCS11
			}
			p, err := start("--namespace=keys-refused", "--policy="+file)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- p.Wait() }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("the signer exited 0")
				}
			case <-time.After(30 * time.Second):
				p.Stop(time.Second)
				t.Fatalf("the signer did not stop: %s", p.Tail())
			}
			log := p.Tail()
			for _, want := range append(tc.says, "example.com/refused") {
				if !strings.Contains(log, want) {
					t.Errorf("the signer's last words do not name %q:\n%s", want, log)
				}
			}
		})
	}
}

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	certs, err := bundle.ParseCertificates(data)
	if err != nil || len(certs) == 0 {
		t.Fatalf("no certificate in %q: %v", data, err)
	}
	return certs[0]
}

// keyAvailable reads the signer's trustsync_signer_key_available for its keeper.
func keyAvailable(t *testing.T, ks *keeperSigner) float64 {
	t.Helper()
	text, err := ks.process.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	m, err := scrape.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return m.Sum("trustsync_signer_key_available", map[string]string{"signer": ks.name, "keeper": ks.kind})
}

// keeperWaits reads how many attempts at requests of kind found the signer's keeper
// away (trustsync_signer_request_waits_total).
func keeperWaits(t *testing.T, ks *keeperSigner, kind string) float64 {
	t.Helper()
	text, err := ks.process.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	m, err := scrape.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return m.Sum("trustsync_signer_request_waits_total", map[string]string{"kind": kind, "reason": "KeyUnavailable"})
}

// waitEventFor waits for an Event with reason on the object called name.
func waitEventFor(t *testing.T, client kubernetes.Interface, name, reason string) {
	t.Helper()
	poll.Eventually(t, time.Minute, "a "+reason+" Event on "+name, func() (bool, string) {
		events, err := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": name, "reason": reason}.String()})
		if err != nil {
			return false, err.Error()
		}
		return len(events.Items) > 0, "no " + reason + " Event on " + name
	})
}
