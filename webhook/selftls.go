package webhook

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/bundle"
)

const (
	selfCAValidity      = 10 * 365 * 24 * time.Hour
	selfServingValidity = 365 * 24 * time.Hour
	keyCACert           = "ca.crt"
	keyCAKey            = "ca.key"
)

// selfTLS manages the webhook's own serving certificate, so the chart needs nothing
// else installed: a CA and a serving certificate for the Service's DNS names, kept in a
// Secret read through the API (no volume that might not exist yet on a first start)
// and served from memory (GetCertificate; nothing is written to disk), the CA patched
// into the webhook's own configurations, the serving certificate renewed at two thirds
// of its life.
//
// With leader election only the Lease holder creates and renews the Secret and sets
// caBundle; the others only read the Secret. Should two ever act at once (a Lease
// handed over mid-write, or election off), they still agree through the Secret itself:
// a creation race ends in AlreadyExists and a renewal race in a resourceVersion
// conflict, and the loser reads the winner's.
type selfTLS struct {
	client     kubernetes.Interface
	namespace  string
	secretName string
	service    string
	configName string
	clock      clock.PassiveClock
	// leading reports whether this replica may write; nil means always.
	leading func() bool
	// events records, on the Secret, what was generated or renewed; nil records none.
	events record.EventRecorder

	// released is closed once the leader election has ended and released the Lease;
	// nil without leader election.
	released <-chan struct{}
	// serving is the certificate served; served is its CA.
	serving atomic.Pointer[tls.Certificate]
	served  atomic.Pointer[[]byte]
	// trusted caches caTrusted's answer for a moment: readiness probes of every
	// replica would otherwise read both configurations each time.
	trustedMu   sync.Mutex
	trustedAt   time.Time
	trustedLast bool
}

func (s *selfTLS) event(secret *corev1.Secret, reason, messageFmt string, args ...any) {
	if s.events != nil {
		s.events.Eventf(secret, corev1.EventTypeNormal, reason, messageFmt, args...)
	}
}

// GetCertificate is tls.Config's hook: the certificate sync last took from the
// Secret, handed over in memory (no files to write and poll back).
func (s *selfTLS) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := s.serving.Load()
	if c == nil {
		return nil, fmt.Errorf("no serving certificate yet: the Secret %s/%s has not been read", s.namespace, s.secretName)
	}
	return c, nil
}

func (s *selfTLS) dnsNames() []string {
	return []string{s.service, s.service + "." + s.namespace, s.service + "." + s.namespace + ".svc", s.service + "." + s.namespace + ".svc.cluster.local"}
}

// sync makes the Secret current (creating or renewing it when due), hands its
// certificate and key to the server, and makes the webhook configurations trust its
// CA.
func (s *selfTLS) sync(ctx context.Context) error {
	leading := s.leading == nil || s.leading()
	var secret *corev1.Secret
	var err error
	if leading {
		secret, err = s.ensureSecret(ctx)
	} else {
		secret, err = s.client.CoreV1().Secrets(s.namespace).Get(ctx, s.secretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("the Secret %s/%s does not exist yet; waiting for the replica holding the Lease %s/%s to create it", s.namespace, s.secretName, s.namespace, s.secretName)
		}
	}
	if err != nil {
		return err
	}
	// A pair that does not load (a hand-edited Secret) leaves the current one serving.
	pair, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return fmt.Errorf("the certificate and key in Secret %s/%s do not load: %w; delete the Secret and the webhook makes a new one", s.namespace, s.secretName, err)
	}
	s.serving.Store(&pair)
	ca := secret.Data[keyCACert]
	s.served.Store(&ca)
	if !leading {
		return nil
	}
	return s.patchCABundles(ctx, secret.Data[keyCACert])
}

// caTrusted reports whether every webhook of both configurations trusts the CA of the
// certificate this replica serves. Until then the API server would refuse this
// replica's answers (x509: unknown authority), so it is not ready.
func (s *selfTLS) caTrusted(ctx context.Context) bool {
	s.trustedMu.Lock()
	defer s.trustedMu.Unlock()
	if !s.trustedAt.IsZero() && s.clock.Since(s.trustedAt) < 2*time.Second {
		return s.trustedLast
	}
	ca := s.served.Load()
	if ca == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	configs, err := s.clientConfigs(ctx)
	if err != nil {
		klog.V(2).InfoS("Cannot read the webhook configurations for readiness", "err", err)
		return false
	}
	trusted := true
	for _, c := range configs {
		if !bytes.Contains(c.CABundle, bytes.TrimSpace(*ca)) {
			trusted = false
		}
	}
	if !trusted {
		klog.V(2).InfoS("Not ready: the webhook configurations do not trust the served certificate's CA yet", "configuration", s.configName)
	}
	s.trustedAt, s.trustedLast = s.clock.Now(), trusted
	return trusted
}

// clientConfigs returns the client configs of every webhook of both configurations; a
// configuration the chart did not install has none.
func (s *selfTLS) clientConfigs(ctx context.Context) ([]admissionregistrationv1.WebhookClientConfig, error) {
	var configs []admissionregistrationv1.WebhookClientConfig
	admission := s.client.AdmissionregistrationV1()
	v, err := admission.ValidatingWebhookConfigurations().Get(ctx, s.configName, metav1.GetOptions{})
	switch {
	case err == nil:
		for _, w := range v.Webhooks {
			configs = append(configs, w.ClientConfig)
		}
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	m, err := admission.MutatingWebhookConfigurations().Get(ctx, s.configName, metav1.GetOptions{})
	switch {
	case err == nil:
		for _, w := range m.Webhooks {
			configs = append(configs, w.ClientConfig)
		}
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	return configs, nil
}

// run syncs every interval until ctx is done, so a renewal, or a caBundle emptied by a
// `helm upgrade`, is put right within that time; a value on now (this replica has just
// become the leader) syncs at once.
func (s *selfTLS) run(ctx context.Context, interval time.Duration, now <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-now:
		}
		if err := s.sync(ctx); err != nil {
			klog.ErrorS(err, "Self-managed TLS sync failed; serving the current certificate", "secret", s.namespace+"/"+s.secretName)
		}
	}
}

func (s *selfTLS) ensureSecret(ctx context.Context) (*corev1.Secret, error) {
	secrets := s.client.CoreV1().Secrets(s.namespace)
	secret, err := secrets.Get(ctx, s.secretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if secret, err = s.newSecret(); err != nil {
			return nil, err
		}
		created, err := secrets.Create(ctx, secret, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return secrets.Get(ctx, s.secretName, metav1.GetOptions{})
		}
		if err == nil {
			klog.InfoS("Generated the webhook's CA and serving certificate", "secret", s.namespace+"/"+s.secretName)
			s.event(created, "WebhookCertificateGenerated", "Generated the webhook's CA and a serving certificate for Service %s.%s, valid until %s", s.service, s.namespace, s.clock.Now().Add(selfServingValidity).UTC().Format(time.RFC3339))
		}
		return created, err
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read Secret %s/%s: %w", s.namespace, s.secretName, err)
	}
	if !s.renewalDue(secret) {
		return secret, nil
	}
	renewed := secret.DeepCopy()
	if err := s.reissue(renewed); err != nil {
		return nil, err
	}
	updated, err := secrets.Update(ctx, renewed, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return secrets.Get(ctx, s.secretName, metav1.GetOptions{})
	}
	if err == nil {
		klog.InfoS("Renewed the webhook's serving certificate", "secret", s.namespace+"/"+s.secretName)
		s.event(updated, "WebhookCertificateRenewed", "Renewed the webhook's serving certificate for Service %s.%s; the new one is valid until %s", s.service, s.namespace, s.clock.Now().Add(selfServingValidity).UTC().Format(time.RFC3339))
	}
	return updated, err
}

// renewalDue: the serving certificate is past two thirds of its life, does not parse,
// or does not name this Service.
func (s *selfTLS) renewalDue(secret *corev1.Secret) bool {
	block, _ := pem.Decode(secret.Data[corev1.TLSCertKey])
	if block == nil {
		return true
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || cert.VerifyHostname(s.service+"."+s.namespace+".svc") != nil {
		return true
	}
	renewAt := cert.NotBefore.Add(cert.NotAfter.Sub(cert.NotBefore) * 2 / 3)
	return !s.clock.Now().Before(renewAt)
}

func (s *selfTLS) newSecret() (*corev1.Secret, error) {
	now := s.clock.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl, err := bundle.CATemplate(pkix.Name{CommonName: "trustsync-webhook-ca"}, now, selfCAValidity)
	if err != nil {
		return nil, err
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	caKeyPEM, err := bundle.EncodePrivateKey(caKey)
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s.secretName, Namespace: s.namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "trustsync", "app.kubernetes.io/component": "webhook-tls"}},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			keyCACert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
			keyCAKey:  caKeyPEM,
		},
	}
	return secret, s.reissue(secret)
}

// reissue puts a new serving certificate and key, signed by the Secret's CA, into it.
func (s *selfTLS) reissue(secret *corev1.Secret) error {
	caBlock, _ := pem.Decode(secret.Data[keyCACert])
	keyBlock, _ := pem.Decode(secret.Data[keyCAKey])
	if caBlock == nil || keyBlock == nil {
		return fmt.Errorf("the Secret %s/%s has no %s and %s to sign with; delete it and the webhook makes a new one", s.namespace, s.secretName, keyCACert, keyCAKey)
	}
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		return err
	}
	caKey, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
	if err != nil {
		return err
	}
	signer, ok := caKey.(crypto.Signer)
	if !ok {
		return errors.New("the webhook CA key cannot sign")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := bundle.NewSerialNumber()
	if err != nil {
		return err
	}
	now := s.clock.Now()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: s.service + "." + s.namespace + ".svc"}, DNSNames: s.dnsNames(),
		NotBefore: now.Add(-bundle.Backdate), NotAfter: now.Add(selfServingValidity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, key.Public(), signer)
	if err != nil {
		return err
	}
	keyPEM, err := bundle.EncodePrivateKey(key)
	if err != nil {
		return err
	}
	secret.Data[corev1.TLSCertKey] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	secret.Data[corev1.TLSPrivateKeyKey] = keyPEM
	return nil
}

// patchCABundles makes every webhook of the Validating and Mutating configurations
// named configName trust caPEM, writing only when something differs.
func (s *selfTLS) patchCABundles(ctx context.Context, caPEM []byte) error {
	admission := s.client.AdmissionregistrationV1()
	v, err := admission.ValidatingWebhookConfigurations().Get(ctx, s.configName, metav1.GetOptions{})
	err = s.setCAIn("ValidatingWebhookConfiguration", err, caPEM, func() []*admissionregistrationv1.WebhookClientConfig {
		configs := make([]*admissionregistrationv1.WebhookClientConfig, len(v.Webhooks))
		for i := range v.Webhooks {
			configs[i] = &v.Webhooks[i].ClientConfig
		}
		return configs
	}, func() error {
		_, err := admission.ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	m, err := admission.MutatingWebhookConfigurations().Get(ctx, s.configName, metav1.GetOptions{})
	return s.setCAIn("MutatingWebhookConfiguration", err, caPEM, func() []*admissionregistrationv1.WebhookClientConfig {
		configs := make([]*admissionregistrationv1.WebhookClientConfig, len(m.Webhooks))
		for i := range m.Webhooks {
			configs[i] = &m.Webhooks[i].ClientConfig
		}
		return configs
	}, func() error {
		_, err := admission.MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{})
		return err
	})
}

// setCAIn finishes one configuration's patch: getErr is how reading it went (a missing
// configuration is not an error: the chart may not install it), clientConfigs its
// webhooks' client configs, update saves it; it is saved only when a caBundle changed.
func (s *selfTLS) setCAIn(kind string, getErr error, caPEM []byte, clientConfigs func() []*admissionregistrationv1.WebhookClientConfig, update func() error) error {
	switch {
	case apierrors.IsNotFound(getErr):
		return nil
	case getErr != nil:
		return fmt.Errorf("failed to read %s %q: %w", kind, s.configName, getErr)
	}
	if !setCABundle(clientConfigs(), caPEM) {
		return nil
	}
	if err := update(); err != nil {
		return fmt.Errorf("failed to set the CA of %s %q: %w", kind, s.configName, err)
	}
	return nil
}

// setCABundle sets every config's caBundle and reports whether any changed.
func setCABundle(configs []*admissionregistrationv1.WebhookClientConfig, caPEM []byte) bool {
	changed := false
	for _, c := range configs {
		if !bytes.Equal(c.CABundle, caPEM) {
			c.CABundle, changed = caPEM, true
		}
	}
	return changed
}
