package signer

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/policy"

	"github.com/trustsync/trustsync/signer/keeper"
)

// caKeys is where one signer's CA keys live. Without a keeper, in the CA Secret, as
// PEM beside each certificate. With one (the policy file's keyRef), in the keeper:
// the Secret records only where each key is (AnnotationKey, AnnotationNextKey), and
// the signer signs through the keeper without ever holding a key.
type caKeys struct {
	keeper *keeper.Keeper
}

// kind names the keeper, as the trustsync_signer_key_available metric labels it.
func (k caKeys) kind() string {
	if k.keeper == nil {
		return "secret"
	}
	return k.keeper.Kind()
}

// generate makes the key of a new CA created at t, and says where it lives ("" for
// the Secret). In a keeper the first CA takes the key the keyRef names, made if the
// keeper does not hold it yet (an operator may have made it in a key ceremony); each
// rotation makes a new key beside it, named for the time (NextName).
func (k caKeys) generate(ctx context.Context, t time.Time, first bool) (crypto.Signer, string, error) {
	if k.keeper == nil {
		key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
		if err != nil {
			return nil, "", fmt.Errorf("failed to generate a CA key: %w", err)
		}
		return key, "", nil
	}
	if first {
		s, err := k.keeper.Find(ctx, k.keeper.FirstKey())
		if err != nil {
			return nil, "", err
		}
		if s != nil {
			return s, k.keeper.FirstKey(), nil
		}
	}
	where, s, err := k.keeper.Create(ctx, k.keeper.KeyName(t, first))
	if err != nil {
		return nil, "", err
	}
	return s, where, nil
}

// resolve returns the signer of a CA whose Secret holds keyPEM or records where.
// A Secret with a certificate and neither, under a keyRef, is a CA brought in for
// the key the keyRef names (issued by a corporate CA to the HSM's key, say).
func (k caKeys) resolve(ctx context.Context, cert *x509.Certificate, keyPEM []byte, where string) (crypto.Signer, string, error) {
	switch {
	case len(keyPEM) > 0 && where != "":
		return nil, "", fmt.Errorf("it holds a key and also records one at %s; remove one of them", where)
	case len(keyPEM) > 0:
		key, err := pki.DecodePrivateKeyBytes(keyPEM)
		if err != nil {
			return nil, "", fmt.Errorf("cannot parse the CA key: %w", err)
		}
		if ok, err := pki.PublicKeyMatchesCertificate(key.Public(), cert); err != nil || !ok {
			return nil, "", fmt.Errorf("the CA key does not match the CA certificate")
		}
		return key, "", nil
	case k.keeper == nil && where != "":
		return nil, "", fmt.Errorf("its key lives in a keeper (%s) but this signer has no keyRef: set the signer's keyRef in the policy file", where)
	case k.keeper == nil:
		return nil, "", fmt.Errorf("it holds no CA key")
	case where == "":
		where = k.keeper.FirstKey()
	}
	s, err := k.keeper.Signer(ctx, where, cert.PublicKey)
	if err != nil {
		return nil, "", err
	}
	return s, where, nil
}

// keeperProbe is how often a keeper that cannot sign is asked again while no request
// asks it: with requests retried as often, signing resumes within seconds of its
// return.
const keeperProbe = 5 * time.Second

// openKeepers opens the keeper of each signer that names one. One that cannot be
// opened stops the signer at its start, naming the signer and its keyRef: a wrong
// keyRef is not a keeper that is away.
func openKeepers(ctx context.Context, pol *policy.Policy, m *Metrics) (map[string]caKeys, func(), error) {
	keys := map[string]caKeys{}
	var opened []*keeper.Keeper
	closeAll := func() {
		for _, k := range opened {
			_ = k.Close()
		}
	}
	for _, s := range pol.Signers {
		if s.Key == nil {
			m.keyAvailable.WithLabelValues(s.SignerName, caKeys{}.kind()).Set(1)
			continue
		}
		k, err := keeper.Open(ctx, s.Key)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("signer %s: %w", s.SignerName, err)
		}
		opened = append(opened, k)
		gauge, name := m.keyAvailable.WithLabelValues(s.SignerName, k.Kind()), s.SignerName
		k.OnChange(func(available bool, err error) {
			if available {
				gauge.Set(1)
				return
			}
			gauge.Set(0)
			klog.ErrorS(err, "The CA key's keeper cannot sign; requests wait for it", "signer", name, "keeper", k.Describe())
		})
		keys[s.SignerName] = caKeys{keeper: k}
		klog.InfoS("CA keys live in a keeper", "signer", s.SignerName, "keeper", k.Describe(), "keyRef", s.Key.String())
	}
	return keys, closeAll, nil
}

// watch, while the keeper cannot sign, asks it again every keeperProbe for the key
// that signs now; once it answers, back runs (the signer's requests are queued
// again). It returns when ctx ends.
func (k caKeys) watch(ctx context.Context, signing func() string, back func()) {
	if k.keeper == nil {
		return
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if k.keeper.Available() {
			return
		}
		if err := k.keeper.Probe(ctx, signing()); err == nil {
			klog.InfoS("The CA key's keeper signs again", "keeper", k.keeper.Describe())
			back()
		}
	}, keeperProbe)
}
