// Package keeper signs with CA keys that live outside the cluster: in a PKCS#11 token
// or in AWS KMS. The signer holds a crypto.Signer that asks the keeper to sign; the
// private key never leaves it, and nothing here can read it.
//
// go.step.sm/crypto/kms does the talking (ThalesGroup/crypto11 for PKCS#11, the AWS
// SDK for KMS); this package adds what a CA needs around it: keys named and made
// non-extractable, a signer whose key is checked against the certificate it stands
// for, and failing closed: an unreachable keeper is an UnavailableError, the
// connection is dropped and made again on the next use, and no key is ever made
// in its place.
package keeper

import (
	"context"
	"crypto"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"go.step.sm/crypto/kms/apiv1"

	"github.com/trustsync/trustsync/keyuri"
)

// Keeper is one signer's keeper, named by its keyRef.
type Keeper struct {
	ref *keyuri.Ref
	// connect opens the keeper: the library's KeyManager for ref.
	connect func(context.Context, *keyuri.Ref) (apiv1.KeyManager, error)
	// retryAfter bounds how often a broken keeper is opened again, so that a burst
	// of requests does not hammer a token that is not there.
	retryAfter time.Duration
	now        func() time.Time

	mu       sync.Mutex
	km       apiv1.KeyManager
	signers  map[string]crypto.Signer
	lastErr  error
	brokenAt time.Time
	// onChange, when set, hears every change of availability (the metric, Events).
	onChange func(available bool, err error)
}

// UnavailableError is a keeper that cannot sign now: its module fails, its token is
// gone, its PIN is refused, its service does not answer. A request waits for it; the
// signer never falls back to a key of its own.
type UnavailableError struct {
	Keeper string
	Key    string
	Err    error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("the CA key %s in %s cannot sign: %v", e.Key, e.Keeper, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Open connects to the keeper ref names, once: a keyRef that cannot be opened
// (no such module, token, PIN file, region) is refused here, at the signer's start,
// with a message naming it.
func Open(ctx context.Context, ref *keyuri.Ref) (*Keeper, error) {
	k := newKeeper(ref, connect)
	km, err := k.connect(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("keyRef %s: cannot open %s: %w", ref, k.Describe(), err)
	}
	k.km = km
	return k, nil
}

func newKeeper(ref *keyuri.Ref, connect func(context.Context, *keyuri.Ref) (apiv1.KeyManager, error)) *Keeper {
	return &Keeper{ref: ref, connect: connect, retryAfter: time.Second, now: time.Now, signers: map[string]crypto.Signer{}}
}

// OnChange sets what hears the keeper become available or unavailable. It is called
// once at once with the current state.
func (k *Keeper) OnChange(f func(available bool, err error)) {
	k.mu.Lock()
	k.onChange = f
	err := k.lastErr
	k.mu.Unlock()
	f(err == nil, err)
}

// Available says whether the keeper answered the last time it was asked.
func (k *Keeper) Available() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastErr == nil
}

// Kind is the keeper's kind, as keyRef's scheme names it (the metric's label).
func (k *Keeper) Kind() string { return k.ref.Keeper }

// Describe names the keeper for people: which token, or which region's KMS.
func (k *Keeper) Describe() string {
	switch k.ref.Keeper {
	case keyuri.KeeperPKCS11:
		return fmt.Sprintf("PKCS#11 token %q (module %s)", k.ref.Token, k.ref.ModulePath)
	case keyuri.KeeperAWSKMS:
		if k.ref.Endpoint != "" {
			return fmt.Sprintf("AWS KMS in %s at %s", k.ref.Region, k.ref.Endpoint)
		}
		return "AWS KMS in " + k.ref.Region
	}
	return k.ref.Keeper
}

// FirstKey is the key the keyRef itself names: the one a signer's first CA uses.
func (k *Keeper) FirstKey() string { return k.ref.Key() }

// Signer is the signer for key (as Key or a CA Secret records it), whose public key
// must be want's: a key swapped in the keeper under the same name signs nothing.
func (k *Keeper) Signer(ctx context.Context, key string, want crypto.PublicKey) (crypto.Signer, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, err := k.signer(ctx, key)
	if err != nil {
		return nil, err
	}
	if !samePublicKey(s.Public(), want) {
		return nil, fmt.Errorf("the key %s in %s is not the key of the CA certificate: it was replaced, or the CA Secret names the wrong key; restore the key, or point the Secret at the right one", key, k.Describe())
	}
	return &keySigner{k: k, key: key, pub: s.Public()}, nil
}

// Find returns the key if the keeper holds it, or nil when it holds no such key.
func (k *Keeper) Find(ctx context.Context, key string) (crypto.Signer, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, err := k.signer(ctx, key)
	var nf apiv1.NotFoundError
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &keySigner{k: k, key: key, pub: s.Public()}, nil
}

// Create makes a new ECDSA P-256 key called name in the keeper, non-extractable and
// sensitive (PKCS#11) or for signing only (KMS), and returns where it is (the key
// to record) and its signer.
func (k *Keeper) Create(ctx context.Context, name string) (string, crypto.Signer, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	km, err := k.open(ctx)
	if err != nil {
		return "", nil, err
	}
	req := &apiv1.CreateKeyRequest{SignatureAlgorithm: apiv1.ECDSAWithSHA256}
	switch k.ref.Keeper {
	case keyuri.KeeperPKCS11:
		id := make([]byte, 16)
		if _, err := io.ReadFull(rand.Reader, id); err != nil {
			return "", nil, err
		}
		r := *k.ref
		r.Object, r.ID = name, id
		req.Name = r.Key()
	case keyuri.KeeperAWSKMS:
		req.Name = "awskms:name=" + name
	}
	resp, err := km.CreateKey(req)
	if err != nil {
		return "", nil, k.broken(req.Name, fmt.Errorf("creating key %s: %w", name, err))
	}
	// The keeper names the key it made: the PKCS#11 URI asked for, or KMS's key id.
	key := resp.Name
	s, err := k.signer(ctx, key)
	if err != nil {
		return "", nil, err
	}
	return key, &keySigner{k: k, key: key, pub: s.Public()}, nil
}

// signer loads key's signer from the open keeper, caching it. k.mu is held.
func (k *Keeper) signer(ctx context.Context, key string) (crypto.Signer, error) {
	if s, ok := k.signers[key]; ok {
		return s, nil
	}
	km, err := k.open(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := k.ref.WithKey(key); err != nil {
		return nil, err
	}
	s, err := km.CreateSigner(&apiv1.CreateSignerRequest{SigningKey: key})
	if err != nil {
		if isNotFound(err) {
			return nil, apiv1.NotFoundError{Message: fmt.Sprintf("%s holds no key %s", k.Describe(), key)}
		}
		return nil, k.broken(key, err)
	}
	k.signers[key] = s
	return s, nil
}

// open returns the open keeper, opening it if it is not; after a failure, not
// again within retryAfter. k.mu is held.
func (k *Keeper) open(ctx context.Context) (apiv1.KeyManager, error) {
	if k.km != nil {
		return k.km, nil
	}
	if k.lastErr != nil && k.now().Sub(k.brokenAt) < k.retryAfter {
		return nil, &UnavailableError{Keeper: k.Describe(), Key: k.ref.Key(), Err: k.lastErr}
	}
	km, err := k.connect(ctx, k.ref)
	if err != nil {
		return nil, k.broken(k.ref.Key(), err)
	}
	k.km = km
	k.changed(nil)
	return km, nil
}

// broken drops the connection (its sessions and key handles may be dead: a token
// pulled and put back hands out new ones) and says so. k.mu is held.
func (k *Keeper) broken(key string, err error) error {
	if k.km != nil {
		_ = k.km.Close()
	}
	k.km, k.signers, k.brokenAt = nil, map[string]crypto.Signer{}, k.now()
	k.changed(err)
	return &UnavailableError{Keeper: k.Describe(), Key: key, Err: err}
}

func (k *Keeper) changed(err error) {
	was := k.lastErr == nil
	k.lastErr = err
	if k.onChange != nil && (was != (err == nil) || err != nil) {
		k.onChange(err == nil, err)
	}
}

// Probe checks that key can be reached now, opening the keeper again if it broke:
// the way back to signing while no request asks.
func (k *Keeper) Probe(ctx context.Context, key string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, err := k.signer(ctx, key)
	return err
}

// Close closes the keeper's connection.
func (k *Keeper) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.km == nil {
		return nil
	}
	err := k.km.Close()
	k.km, k.signers = nil, map[string]crypto.Signer{}
	return err
}

// keySigner signs through whatever connection the keeper has now, so a signer handed
// out before the keeper broke signs again once it is back.
type keySigner struct {
	k   *Keeper
	key string
	pub crypto.PublicKey
}

func (s *keySigner) Public() crypto.PublicKey { return s.pub }

func (s *keySigner) Sign(r io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	s.k.mu.Lock()
	inner, err := s.k.signer(context.Background(), s.key)
	s.k.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !samePublicKey(inner.Public(), s.pub) {
		return nil, &UnavailableError{Keeper: s.k.Describe(), Key: s.key, Err: errors.New("the key under this name is no longer the CA's key (replaced in the keeper)")}
	}
	// Signed outside the lock: a KMS answers in milliseconds, and the signer's
	// workers sign side by side.
	sig, err := inner.Sign(r, digest, opts)
	if err != nil {
		s.k.mu.Lock()
		defer s.k.mu.Unlock()
		if s.k.signers[s.key] == inner {
			return nil, s.k.broken(s.key, err)
		}
		return nil, &UnavailableError{Keeper: s.k.Describe(), Key: s.key, Err: err}
	}
	return sig, nil
}

func samePublicKey(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}

// KeyName names a new key for a CA made at t: the first one takes the keyRef's own
// name; each rotation's adds the time to it, so a token's keys read in order and
// say which CA they are.
func (k *Keeper) KeyName(t time.Time, first bool) string {
	base := "trustsync-ca"
	switch {
	case k.ref.Keeper == keyuri.KeeperPKCS11 && k.ref.Object != "":
		base = k.ref.Object
	case k.ref.Keeper == keyuri.KeeperAWSKMS && strings.HasPrefix(k.ref.KeyID, "alias/"):
		base = strings.TrimPrefix(k.ref.KeyID, "alias/")
	}
	if first {
		return base
	}
	return base + "-" + t.UTC().Format("20060102T150405Z")
}
