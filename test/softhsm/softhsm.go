// Package softhsm makes a real PKCS#11 token for tests: SoftHSM2, Debian's package
// (hack/softhsm.sh installs it), with its own configuration and token directory, so
// tests never touch the machine's tokens. A token can be pulled and put back, to
// show what a signer does while its keeper is gone.
package softhsm

import (
	"crypto"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ThalesGroup/crypto11"
)

// Modules are where Debian puts SoftHSM2's PKCS#11 module.
var Modules = []string{"/usr/lib/softhsm/libsofthsm2.so", "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so", "/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so"}

const (
	// PIN and SOPIN are the token's user and security officer PINs.
	PIN   = "20261129"
	SOPIN = "5a5a5a5a"
)

// Token is one initialised SoftHSM2 token.
type Token struct {
	Label string
	// Conf is the SoftHSM2 configuration: SOFTHSM2_CONF must name it in every
	// process that opens the token (Env).
	Conf    string
	Dir     string
	Module  string
	PINFile string
}

// Module finds SoftHSM2's module, or says how to install it.
func Module() (string, error) {
	for _, m := range Modules {
		if _, err := os.Stat(m); err == nil {
			return m, nil
		}
	}
	return "", fmt.Errorf("SoftHSM2 is not installed (none of %s): run hack/softhsm.sh, which make test runs", strings.Join(Modules, ", "))
}

// New initialises a token labelled label in a directory of t's. SoftHSM2 missing
// fails the test: the cases that need a real token never skip.
func New(t testing.TB, label string) *Token {
	t.Helper()
	tok, err := Init(t.TempDir(), label)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOFTHSM2_CONF", tok.Conf)
	return tok
}

// Init initialises a token labelled label under dir.
func Init(dir, label string) (*Token, error) {
	module, err := Module()
	if err != nil {
		return nil, err
	}
	tok := &Token{Label: label, Conf: filepath.Join(dir, "softhsm2.conf"), Dir: filepath.Join(dir, "tokens"), Module: module, PINFile: filepath.Join(dir, "pin")}
	if err := os.MkdirAll(tok.Dir, 0o700); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf("directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n", tok.Dir)
	if err := os.WriteFile(tok.Conf, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(tok.PINFile, []byte(PIN), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command("softhsm2-util", "--init-token", "--free", "--label", label, "--pin", PIN, "--so-pin", SOPIN)
	cmd.Env = tok.Env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("softhsm2-util --init-token: %w\n%s", err, out)
	}
	return tok, nil
}

// At is the token labelled label that docs/signer.md's commands made in dir: its
// softhsm2.conf, tokens/ and pin file there.
func At(dir, label string) (*Token, error) {
	module, err := Module()
	if err != nil {
		return nil, err
	}
	tok := &Token{Label: label, Conf: filepath.Join(dir, "softhsm2.conf"), Dir: filepath.Join(dir, "tokens"), Module: module, PINFile: filepath.Join(dir, "pin")}
	for _, f := range []string{tok.Conf, tok.Dir, tok.PINFile} {
		if _, err := os.Stat(f); err != nil {
			return nil, err
		}
	}
	return tok, nil
}

// Env is the environment with SOFTHSM2_CONF pointing at the token's configuration.
func (tok *Token) Env() []string {
	return append(os.Environ(), "SOFTHSM2_CONF="+tok.Conf)
}

// KeyRef is a signer's keyRef naming key object in this token.
func (tok *Token) KeyRef(object string) string {
	return fmt.Sprintf("pkcs11:token=%s;object=%s?module-path=%s&pin-source=%s", tok.Label, object, tok.Module, tok.PINFile)
}

// Pull takes the token away as a pulled HSM card does: its directory moves aside,
// and every open session of it fails from then on. Put puts it back.
func (tok *Token) Pull() error { return os.Rename(tok.Dir, tok.Dir+".pulled") }

// Put puts a pulled token back.
func (tok *Token) Put() error { return os.Rename(tok.Dir+".pulled", tok.Dir) }

// Key is a key pair the token holds, as the token itself describes it.
type Key struct {
	Label       string
	Public      crypto.PublicKey
	Extractable bool
	Sensitive   bool
}

// Keys lists the token's key pairs, read through the token itself (as an auditor
// would with pkcs11-tool), not through the signer under test. SoftHSM2 reads its
// configuration once per process: New's SOFTHSM2_CONF must name this token's.
func (tok *Token) Keys() ([]Key, error) {
	ctx, err := crypto11.Configure(&crypto11.Config{Path: tok.Module, TokenLabel: tok.Label, Pin: PIN})
	if err != nil {
		return nil, err
	}
	defer ctx.Close()
	pairs, err := ctx.FindAllKeyPairs()
	if err != nil {
		return nil, err
	}
	var keys []Key
	for _, p := range pairs {
		attrs, err := ctx.GetAttributes(p, []crypto11.AttributeType{crypto11.CkaLabel, crypto11.CkaExtractable, crypto11.CkaSensitive})
		if err != nil {
			return nil, err
		}
		k := Key{Public: p.Public()}
		if a := attrs[crypto11.CkaLabel]; a != nil {
			k.Label = string(a.Value)
		}
		if a := attrs[crypto11.CkaExtractable]; a != nil {
			k.Extractable = len(a.Value) == 1 && a.Value[0] == 1
		}
		if a := attrs[crypto11.CkaSensitive]; a != nil {
			k.Sensitive = len(a.Value) == 1 && a.Value[0] == 1
		}
		keys = append(keys, k)
	}
	return keys, nil
}
