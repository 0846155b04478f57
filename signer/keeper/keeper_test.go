package keeper

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThalesGroup/crypto11"

	"github.com/trustsync/trustsync/keyuri"
	"github.com/trustsync/trustsync/test/softhsm"
)

// These tests run against a real PKCS#11 token (SoftHSM2): what the signer does
// with a key it cannot see is only as true as the token it is tried on.

func openToken(t *testing.T, tok *softhsm.Token, object string) *Keeper {
	t.Helper()
	ref, err := keyuri.Parse(tok.KeyRef(object))
	if err != nil {
		t.Fatal(err)
	}
	k, err := Open(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return k
}

func signs(t *testing.T, s crypto.Signer) error {
	t.Helper()
	digest := sha256.Sum256([]byte("a certificate's TBS"))
	sig, err := s.Sign(rand.Reader, digest[:], crypto.SHA256)
	if err != nil {
		return err
	}
	if !ecdsa.VerifyASN1(s.Public().(*ecdsa.PublicKey), digest[:], sig) {
		t.Fatal("the signature does not verify with the key's public key")
	}
	return nil
}

func TestCreate_MakesAKeyTheTokenNeverLetsOut(t *testing.T) {
	tok := softhsm.New(t, "trustsync")
	k := openToken(t, tok, "ca-workload")
	key, s, err := k.Create(context.Background(), "ca-workload")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, "pkcs11:token=trustsync;id=") || !strings.HasSuffix(key, ";object=ca-workload") {
		t.Errorf("the key is recorded as %q, want its token, id and object", key)
	}
	if err := signs(t, s); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Public().(*ecdsa.PublicKey); !ok || s.Public().(*ecdsa.PublicKey).Curve != elliptic.P256() {
		t.Errorf("the key is %T, want ECDSA P-256", s.Public())
	}

	// Read the key's attributes through the token itself, as an auditor would.
	ctx, err := crypto11.Configure(&crypto11.Config{Path: tok.Module, TokenLabel: tok.Label, Pin: softhsm.PIN})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	ref, _ := keyuri.Parse(tok.KeyRef("x"))
	at, err := ref.WithKey(key)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := ctx.FindKeyPair(at.ID, []byte(at.Object))
	if err != nil || priv == nil {
		t.Fatalf("the token holds no key pair %s: %v", key, err)
	}
	for attr, want := range map[crypto11.AttributeType]byte{crypto11.CkaExtractable: 0, crypto11.CkaSensitive: 1, crypto11.CkaToken: 1} {
		a, err := ctx.GetAttribute(priv, attr)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Value) != 1 || a.Value[0] != want {
			t.Errorf("the private key's attribute %#x is %v, want %d", uint(attr), a.Value, want)
		}
	}
}

func TestSigner_RefusesAKeyThatIsNotTheCertificates(t *testing.T) {
	tok := softhsm.New(t, "trustsync")
	k := openToken(t, tok, "ca")
	key, _, err := k.Create(context.Background(), "ca")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if _, err := k.Signer(context.Background(), key, other.Public()); err == nil || !strings.Contains(err.Error(), "is not the key of the CA certificate") {
		t.Fatalf("Signer with another certificate's public key = %v, want a refusal", err)
	}
}

func TestFind_SaysNothingForAKeyTheTokenDoesNotHold(t *testing.T) {
	tok := softhsm.New(t, "trustsync")
	k := openToken(t, tok, "ca")
	s, err := k.Find(context.Background(), k.FirstKey())
	if err != nil || s != nil {
		t.Fatalf("Find of a key never made = %v, %v; want nil, nil", s, err)
	}
	if _, err := k.Find(context.Background(), "pkcs11:token=elsewhere;object=ca"); err == nil || !strings.Contains(err.Error(), `not in token "trustsync"`) {
		t.Errorf("Find of a key in another token = %v, want a refusal", err)
	}
}

func TestOpen_RefusesAKeyRefItCannotOpenNamingIt(t *testing.T) {
	tok := softhsm.New(t, "trustsync")
	for _, tc := range []struct {
		name, keyRef, says string
	}{
		{"no such token", strings.Replace(tok.KeyRef("ca"), "token=trustsync", "token=absent", 1), "token=absent"},
		{"no such module", strings.Replace(tok.KeyRef("ca"), tok.Module, "/nonexistent/module.so", 1), "/nonexistent/module.so"},
		{"no such PIN file", strings.Replace(tok.KeyRef("ca"), tok.PINFile, "/nonexistent/pin", 1), "/nonexistent/pin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref, err := keyuri.Parse(tc.keyRef)
			if err != nil {
				t.Fatal(err)
			}
			k, err := Open(context.Background(), ref)
			if err == nil {
				k.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Open = %v, want it to name %q", err, tc.says)
			}
		})
	}
}

func TestSign_FailsClosedWhileTheTokenIsGoneAndSignsAgainOnceItIsBack(t *testing.T) {
	tok := softhsm.New(t, "trustsync")
	k := openToken(t, tok, "ca")
	k.retryAfter = 0
	var changes []bool
	k.OnChange(func(available bool, _ error) { changes = append(changes, available) })
	_, s, err := k.Create(context.Background(), "ca")
	if err != nil {
		t.Fatal(err)
	}
	if err := signs(t, s); err != nil {
		t.Fatal(err)
	}

	if err := tok.Pull(); err != nil {
		t.Fatal(err)
	}
	err = signs(t, s)
	var unavailable *UnavailableError
	if !errors.As(err, &unavailable) {
		t.Fatalf("Sign with the token pulled = %v, want an UnavailableError", err)
	}
	if !strings.Contains(err.Error(), `PKCS#11 token "trustsync"`) {
		t.Errorf("the error %q does not name the token", err)
	}
	// Every try while it is gone fails too, and no key is made elsewhere.
	if err := signs(t, s); !errors.As(err, &unavailable) {
		t.Fatalf("a second Sign with the token pulled = %v, want an UnavailableError", err)
	}

	if err := tok.Put(); err != nil {
		t.Fatal(err)
	}
	if err := signs(t, s); err != nil {
		t.Fatalf("Sign once the token is back = %v", err)
	}
	if len(changes) < 3 || !changes[0] || changes[1] || !changes[len(changes)-1] {
		t.Errorf("availability went %v, want available, unavailable (possibly repeated), available", changes)
	}
}

func TestOpen_WaitsBeforeOpeningABrokenKeeperAgain(t *testing.T) {
	tok := softhsm.New(t, "trustsync")
	k := openToken(t, tok, "ca")
	_, s, err := k.Create(context.Background(), "ca")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	k.now = func() time.Time { return now }
	k.retryAfter = time.Second
	if err := tok.Pull(); err != nil {
		t.Fatal(err)
	}
	if err := signs(t, s); err == nil {
		t.Fatal("Sign with the token pulled succeeded")
	}
	if err := tok.Put(); err != nil {
		t.Fatal(err)
	}
	if err := signs(t, s); err == nil {
		t.Fatal("the keeper was opened again before retryAfter")
	}
	now = now.Add(time.Second)
	if err := signs(t, s); err != nil {
		t.Fatalf("Sign after retryAfter = %v", err)
	}
}
