package keeper

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ThalesGroup/crypto11"

	"github.com/trustsync/trustsync/keyuri"
	"github.com/trustsync/trustsync/test/localkms"
	"github.com/trustsync/trustsync/test/softhsm"
)

// These tests run against real keepers: a PKCS#11 token (SoftHSM2) and an
// implementation of the AWS KMS API (local-kms). What the signer does with a key it
// cannot see is only as true as the keeper it is tried on. The conformance cases run
// against both; what only one keeper has is tested apart.

// keeperFixture is one real keeper, made for a test.
type keeperFixture struct {
	kind string
	// keyRef names key name in the keeper; away and back take the keeper away (a
	// token pulled, a KMS stopped) and bring it back with its keys.
	keyRef     func(name string) string
	away, back func() error
}

// keepers are the real keepers the conformance cases run against.
var keepers = []struct {
	kind  string
	start func(*testing.T) keeperFixture
}{
	{keyuri.KeeperPKCS11, func(t *testing.T) keeperFixture {
		tok := softhsm.New(t, "trustsync")
		return keeperFixture{kind: keyuri.KeeperPKCS11, keyRef: tok.KeyRef, away: tok.Pull, back: tok.Put}
	}},
	{keyuri.KeeperAWSKMS, func(t *testing.T) keeperFixture {
		kms := localkms.Start(t)
		return keeperFixture{kind: keyuri.KeeperAWSKMS, keyRef: kms.KeyRef, away: func() error { kms.Stop(); return nil }, back: kms.Start}
	}},
}

// conformance runs test against each keeper.
func conformance(t *testing.T, test func(t *testing.T, f keeperFixture)) {
	for _, k := range keepers {
		t.Run(k.kind, func(t *testing.T) { test(t, k.start(t)) })
	}
}

func open(t *testing.T, keyRef string) *Keeper {
	t.Helper()
	ref, err := keyuri.Parse(keyRef)
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

func openToken(t *testing.T, tok *softhsm.Token, object string) *Keeper {
	t.Helper()
	return open(t, tok.KeyRef(object))
}

func TestConformance_CreateMakesAP256KeyThatSignsAndIsFoundAgain(t *testing.T) {
	conformance(t, func(t *testing.T, f keeperFixture) {
		k := open(t, f.keyRef("ca"))
		if s, err := k.Find(context.Background(), k.FirstKey()); err != nil || s != nil {
			t.Fatalf("Find of a key never made = %v, %v; want nil, nil", s, err)
		}
		key, s, err := k.Create(context.Background(), k.KeyName(time.Now(), true))
		if err != nil {
			t.Fatal(err)
		}
		if err := signs(t, s); err != nil {
			t.Fatal(err)
		}
		if pub, ok := s.Public().(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
			t.Errorf("the key is %T, want ECDSA P-256", s.Public())
		}
		// A restarted signer finds it by what the Secret recorded, and by the keyRef.
		again := open(t, f.keyRef("ca"))
		for _, where := range []string{key, again.FirstKey()} {
			found, err := again.Signer(context.Background(), where, s.Public())
			if err != nil {
				t.Fatalf("Signer(%s) after a restart: %v", where, err)
			}
			if err := signs(t, found); err != nil {
				t.Fatal(err)
			}
		}
		next, _, err := k.Create(context.Background(), k.KeyName(time.Now(), false))
		if err != nil || next == key {
			t.Fatalf("a rotation's key = %q, %v; want a new key beside %q", next, err, key)
		}
	})
}

func TestConformance_SignerRefusesAKeyThatIsNotTheCertificates(t *testing.T) {
	conformance(t, func(t *testing.T, f keeperFixture) {
		k := open(t, f.keyRef("ca"))
		key, _, err := k.Create(context.Background(), "ca")
		if err != nil {
			t.Fatal(err)
		}
		other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if _, err := k.Signer(context.Background(), key, other.Public()); err == nil || !strings.Contains(err.Error(), "is not the key of the CA certificate") {
			t.Fatalf("Signer with another certificate's public key = %v, want a refusal", err)
		}
	})
}

func TestConformance_FailsClosedWhileTheKeeperIsAwayAndSignsAgainOnceItIsBack(t *testing.T) {
	conformance(t, func(t *testing.T, f keeperFixture) {
		k := open(t, f.keyRef("ca"))
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
		if err := f.away(); err != nil {
			t.Fatal(err)
		}
		var unavailable *UnavailableError
		for range 2 {
			if err := signs(t, s); !errors.As(err, &unavailable) {
				t.Fatalf("Sign with the keeper away = %v, want an UnavailableError", err)
			}
		}
		if !strings.Contains(unavailable.Error(), k.Describe()) {
			t.Errorf("the error %q does not name the keeper (%s)", unavailable, k.Describe())
		}
		if err := f.back(); err != nil {
			t.Fatal(err)
		}
		if err := signs(t, s); err != nil {
			t.Fatalf("Sign once the keeper is back = %v", err)
		}
		if len(changes) < 3 || !changes[0] || changes[1] || !changes[len(changes)-1] {
			t.Errorf("availability went %v, want available, unavailable (possibly repeated), available", changes)
		}
	})
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

func TestOpen_RefusesAKeyRefItCannotOpenNamingIt(t *testing.T) {
	tok := softhsm.New(t, "trustsync")
	localkms.Credentials(t)
	for _, tc := range []struct {
		name, keyRef, says string
	}{
		{"no such token", strings.Replace(tok.KeyRef("ca"), "token=trustsync", "token=absent", 1), "token=absent"},
		{"no such module", strings.Replace(tok.KeyRef("ca"), tok.Module, "/nonexistent/module.so", 1), "/nonexistent/module.so"},
		{"no such PIN file", strings.Replace(tok.KeyRef("ca"), tok.PINFile, "/nonexistent/pin", 1), "/nonexistent/pin"},
		{"a KMS that does not answer", "awskms:key-id=alias/ca;region=eu-west-1;endpoint=http://127.0.0.1:1", "127.0.0.1:1"},
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

// A module path the loader could only call unopenable is refused saying what is wrong
// with it: not there at all, or a symlink whose target is not in the container.
func TestCheckModule_SaysWhyAModuleCannotBeOpened(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libvendor.so")
	if err := os.WriteFile(lib, []byte("ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "libdangling.so")
	if err := os.Symlink("../elsewhere/libvendor.so", dangling); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"a file that is there", lib, ""},
		{"no file", filepath.Join(dir, "missing.so"), "no such file in the signer's container: mount the vendor's library there"},
		{"a dangling symlink", dangling, "is a symlink to ../elsewhere/libvendor.so, which is not there in the signer's container: mount the directory that holds the library itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkModule(tc.path)
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("checkModule(%s) = %v, want %q", tc.path, err, tc.want)
			}
		})
	}
}
