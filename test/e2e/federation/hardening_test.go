package federation

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// weakRSACA is a CA with a 1024-bit RSA key (Go makes none smaller).
func weakRSACA(t *testing.T) *x509.Certificate {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "weak RSA CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// Every fetch is authenticated against the trust held at that moment: once the peer
// moved off the CA that authenticated its endpoint and the operator dropped it from
// the bootstrap bundle, a connection kept alive from before (still presenting that
// CA's certificate) delivers nothing.
func TestFederation_EveryFetchIsAuthenticatedByTheTrustHeldThen(t *testing.T) {
	c := start(t)
	old, next, impostor := fixtures.CA("peer's old CA"), fixtures.CA("peer's next CA"), fixtures.CA("impostor")
	// The endpoint keeps presenting a certificate of the old CA, on connections it
	// keeps alive (no idle timeout), as a stolen key would.
	e := serveEndpoint(t, old.Cert, old.Key)
	e.set(bundleDoc(t, 1, old.Cert))
	c.create(t, c.peer("per-fetch-b", e.url, fixtures.Bundle(old)))
	waitSequence(t, c, "per-fetch-b", 1)

	// The peer rotates: its bundle now holds the next CA alone, and the operator's
	// bootstrap bundle follows, so nothing held trusts the old CA any more.
	e.set(bundleDoc(t, 2, next.Cert))
	waitSequence(t, c, "per-fetch-b", 2)
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"trustDomainBundle": fixtures.Bundle(next)}})
	if _, err := dyn(t, c.a).Resource(v1alpha1.FederatedTrustDomainResource).Patch(context.Background(), "per-fetch-b", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.set(bundleDoc(t, 3, impostor.Cert))
	poll.Eventually(t, 30*time.Second, "the old CA's endpoint refused", func() (bool, string) {
		st, reason, msg := ready(c.status(t, "per-fetch-b"))
		return st == metav1.ConditionFalse && reason == v1alpha1.ReasonEndpointUnauthenticated, string(st) + " " + reason + ": " + msg
	})
	if ids := anchorIDs(t, c.imported(t).Spec.TrustBundle); !slices.Equal(ids, []string{bundle.AnchorID(next.Cert.Raw)}) {
		t.Errorf("the imported bundle holds %v, want the peer's next CA alone", ids)
	}
}

func waitSequence(t *testing.T, c *clusters, name string, seq uint64) {
	t.Helper()
	poll.Eventually(t, 30*time.Second, "sequence imported", func() (bool, string) {
		s := c.status(t, name)
		st, reason, msg := ready(s)
		return st == metav1.ConditionTrue && s.Sequence != nil && *s.Sequence == seq, string(st) + " " + reason + ": " + msg
	})
}

// When the FederatedTrustDomain holding a trust domain is deleted, the next one
// claiming it takes over at once (not at a resync), and says so.
func TestFederation_ASecondClaimantTakesOverAtOnce(t *testing.T) {
	c := start(t)
	live := c.liveB(t)
	url := "https://" + c.endpoint + "/" + tdB
	c.create(t, c.peer("holder-b", url, live.Spec.TrustBundle))
	c.waitImported(t, "holder-b")
	c.create(t, c.peer("heir-b", url, live.Spec.TrustBundle))
	poll.Eventually(t, 30*time.Second, "the heir refused while the holder lives", func() (bool, string) {
		st, reason, msg := ready(c.status(t, "heir-b"))
		return reason == v1alpha1.ReasonConflict, string(st) + " " + reason + ": " + msg
	})
	if err := dyn(t, c.a).Resource(v1alpha1.FederatedTrustDomainResource).Delete(context.Background(), "holder-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller's resync is ten minutes: anything within this poll is the
	// deletion's doing.
	poll.Eventually(t, 20*time.Second, "the heir holds the trust domain", func() (bool, string) {
		st, reason, msg := ready(c.status(t, "heir-b"))
		b := c.imported(t)
		owner := ""
		if b != nil && metav1.GetControllerOf(b) != nil {
			owner = metav1.GetControllerOf(b).Name
		}
		return st == metav1.ConditionTrue && owner == "heir-b", string(st) + " " + reason + ": " + msg + "; owner " + owner
	})
}

// The label that decides which pods trust the peer, and the owner whose deletion
// withdraws it, are restored like the anchors when someone else changes them.
func TestFederation_HandEditsOfTheLabelAndTheOwnerAreRestored(t *testing.T) {
	c := start(t)
	live := c.liveB(t)
	c.create(t, c.peer("kept-b", "https://"+c.endpoint+"/"+tdB, live.Spec.TrustBundle))
	c.waitImported(t, "kept-b")
	store := bundleapi.NewStore(dyn(t, c.a), bundle.NativeV1)
	for _, tc := range []struct {
		name string
		edit func(*metav1.ObjectMeta)
	}{
		{"the trust-domain label moved to another domain", func(m *metav1.ObjectMeta) { m.Labels[v1alpha1.TrustDomainLabel] = "other.example" }},
		{"the owner removed", func(m *metav1.ObjectMeta) { m.OwnerReferences = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := c.imported(t)
			tc.edit(&b.ObjectMeta)
			if _, err := store.Update(context.Background(), b, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			poll.Eventually(t, 15*time.Second, "restored", func() (bool, string) {
				b := c.imported(t)
				if b == nil {
					return false, "absent"
				}
				owner := metav1.GetControllerOf(b)
				return b.Labels[v1alpha1.TrustDomainLabel] == tdB && owner != nil && owner.Name == "kept-b",
					"label " + b.Labels[v1alpha1.TrustDomainLabel] + ", owners " + strings.Join(ownerNames(b.OwnerReferences), ",")
			})
			if !slices.ContainsFunc(c.events(t, "kept-b"), func(e corev1.Event) bool { return e.Reason == "BundleRestored" }) {
				t.Error("no BundleRestored Event")
			}
		})
	}
}

func ownerNames(refs []metav1.OwnerReference) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.Name)
	}
	return out
}

// An expired anchor the peer publishes is imported as sent, and said: on the status
// and in a Warning Event.
func TestFederation_AnExpiredAnchorIsImportedAndSaid(t *testing.T) {
	c := start(t)
	current := fixtures.CA("peer's CA")
	expired := fixtures.MustNew(fixtures.Options{CommonName: "peer's expired CA", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	e := serveEndpoint(t, current.Cert, current.Key)
	e.set(bundleDoc(t, 1, current.Cert, expired.Cert))
	c.create(t, c.peer("expired-b", e.url, fixtures.Bundle(current)))
	waitSequence(t, c, "expired-b", 1)
	if _, _, msg := ready(c.status(t, "expired-b")); !strings.Contains(msg, "1 expired anchors") || !strings.Contains(msg, bundle.AnchorID(expired.Cert.Raw)) {
		t.Errorf("the status says %q; want it to name the expired anchor", msg)
	}
	poll.Eventually(t, 10*time.Second, "a Warning Event ExpiredAnchors", func() (bool, string) {
		return slices.ContainsFunc(c.events(t, "expired-b"), func(e corev1.Event) bool { return e.Reason == "ExpiredAnchors" && e.Type == corev1.EventTypeWarning }), "none"
	})
}
