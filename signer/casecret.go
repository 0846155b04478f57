package signer

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/bundle"
)

// The CA Secret: a kubernetes.io/tls Secret, so one cert-manager issues can be
// brought in as is. tls.crt and tls.key are the signing CA (with its chain); ca.crt,
// when present, is the root relying parties trust. The rest is trustsync's rotation
// state.
const (
	keyNextCert    = "next.crt"
	keyNextKey     = "next.key"
	keyRetiredCert = "retired.crt"

	AnnotationSigner          = "trustsync.io/signer-name"
	AnnotationManaged         = "trustsync.io/managed"
	AnnotationNextPublishedAt = "trustsync.io/next-published-at"
	AnnotationRetiredUntil    = "trustsync.io/retired-until"
	AnnotationRotateRequested = bundle.RotateRequestedAnnotation
	AnnotationRotateHandled   = "trustsync.io/rotate-handled"
	AnnotationPhase           = "trustsync.io/rotation-phase"
	AnnotationAnchorsChanged  = "trustsync.io/anchors-changed-at"
	// AnnotationSkipPods, set by an operator, names the pods (namespace/pod, or
	// namespace/* for a whole namespace; comma-separated) a waiting rotation no
	// longer waits for: known stragglers of a forced rotation, say.
	AnnotationSkipPods = "trustsync.io/rotation-skip-pods"
	// AnnotationKey and AnnotationNextKey record where the signing and the next CA's
	// keys live when a keeper holds them (the signer's keyRef): the key's URI without
	// module, PIN file, region or endpoint. tls.key (and next.key) are then empty.
	// AnnotationRetiredKeys lists the retired CAs' keys in the same way, one per
	// retired anchor ("" for a key the Secret held), so the keys that became unused
	// can be named when their anchors go.
	AnnotationKey         = "trustsync.io/key"
	AnnotationNextKey     = "trustsync.io/next-key"
	AnnotationRetiredKeys = "trustsync.io/retired-keys"
)

// secretName is the CA Secret of signerName.
func secretName(prefix, signerName string) string {
	return prefix + strings.ReplaceAll(signerName, "/", "-")
}

// stateFromSecret reads a CA state, its keys found where keys says. A Secret
// trustsync did not create (no managed annotation) is a brought-in CA: used as is,
// never rotated by trustsync.
func stateFromSecret(ctx context.Context, s *corev1.Secret, keys caKeys) (*caState, error) {
	current, err := decodeCA(ctx, s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey], s.Annotations[AnnotationKey], keys)
	if err != nil {
		return nil, fmt.Errorf("in CA Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	if root := s.Data[corev1.ServiceAccountRootCAKey]; len(root) > 0 {
		rootCert, err := pki.DecodeX509CertificateBytes(root)
		if err != nil {
			return nil, fmt.Errorf("in CA Secret %s/%s: ca.crt: %w", s.Namespace, s.Name, err)
		}
		if !current.Anchor().Equal(rootCert) {
			current.Chain = append(current.Chain, rootCert)
		}
	}
	st := &caState{
		Current:         current,
		Managed:         s.Annotations[AnnotationManaged] == "true",
		RotateRequested: s.Annotations[AnnotationRotateRequested],
		RotateHandled:   s.Annotations[AnnotationRotateHandled],
		SkipPods:        bundle.ParsePodList(s.Annotations[AnnotationSkipPods]),
	}
	if v := s.Annotations[AnnotationAnchorsChanged]; v != "" {
		if st.AnchorsChangedAt, err = time.Parse(time.RFC3339, v); err != nil {
			return nil, fmt.Errorf("in CA Secret %s/%s: annotation %s: %w", s.Namespace, s.Name, AnnotationAnchorsChanged, err)
		}
	}
	if len(s.Data[keyNextCert]) > 0 {
		if st.Next, err = decodeCA(ctx, s.Data[keyNextCert], s.Data[keyNextKey], s.Annotations[AnnotationNextKey], keys); err != nil {
			return nil, fmt.Errorf("in CA Secret %s/%s: next CA: %w", s.Namespace, s.Name, err)
		}
		if v := s.Annotations[AnnotationNextPublishedAt]; v != "" {
			if st.NextPublishedAt, err = time.Parse(time.RFC3339, v); err != nil {
				return nil, fmt.Errorf("in CA Secret %s/%s: annotation %s: %w", s.Namespace, s.Name, AnnotationNextPublishedAt, err)
			}
		}
	}
	if len(s.Data[keyRetiredCert]) > 0 {
		certs, err := pki.DecodeX509CertificateSetBytes(s.Data[keyRetiredCert])
		if err != nil {
			return nil, fmt.Errorf("in CA Secret %s/%s: %s: %w", s.Namespace, s.Name, keyRetiredCert, err)
		}
		var until []time.Time
		if err := json.Unmarshal([]byte(s.Annotations[AnnotationRetiredUntil]), &until); err != nil || len(until) != len(certs) {
			return nil, fmt.Errorf("in CA Secret %s/%s: annotation %s does not give one time per retired anchor", s.Namespace, s.Name, AnnotationRetiredUntil)
		}
		var keyRefs []string
		if v := s.Annotations[AnnotationRetiredKeys]; v != "" {
			if err := json.Unmarshal([]byte(v), &keyRefs); err != nil || len(keyRefs) != len(certs) {
				return nil, fmt.Errorf("in CA Secret %s/%s: annotation %s does not give one key (or \"\") per retired anchor", s.Namespace, s.Name, AnnotationRetiredKeys)
			}
		}
		for i, c := range certs {
			ra := retiredAnchor{Cert: c, Until: until[i]}
			if keyRefs != nil {
				ra.KeyRef = keyRefs[i]
			}
			st.Retired = append(st.Retired, ra)
		}
	}
	return st, nil
}

// applyToSecret writes st into s, leaving everything else of s (its other keys and
// annotations, the operator's) alone.
func applyToSecret(st *caState, s *corev1.Secret) error {
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	if st.Managed {
		certPEM, keyPEM, err := encodeCA(st.Current)
		if err != nil {
			return err
		}
		s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey] = certPEM, keyPEM
		if keyPEM == nil {
			// A keeper holds the key. A kubernetes.io/tls Secret (one that held a
			// key before the keeper did) must still have tls.key: it stays, empty.
			delete(s.Data, corev1.TLSPrivateKeyKey)
			if s.Type == corev1.SecretTypeTLS {
				s.Data[corev1.TLSPrivateKeyKey] = []byte{}
			}
		}
		setOrDelete(s.Annotations, AnnotationKey, st.Current.KeyRef)
		s.Annotations[AnnotationManaged] = "true"
	}
	delete(s.Data, keyNextCert)
	delete(s.Data, keyNextKey)
	delete(s.Annotations, AnnotationNextPublishedAt)
	delete(s.Annotations, AnnotationNextKey)
	if st.Next != nil {
		certPEM, keyPEM, err := encodeCA(st.Next)
		if err != nil {
			return err
		}
		s.Data[keyNextCert] = certPEM
		if keyPEM != nil {
			s.Data[keyNextKey] = keyPEM
		}
		setOrDelete(s.Annotations, AnnotationNextKey, st.Next.KeyRef)
		if !st.NextPublishedAt.IsZero() {
			s.Annotations[AnnotationNextPublishedAt] = st.NextPublishedAt.UTC().Format(time.RFC3339Nano)
		}
	}
	delete(s.Data, keyRetiredCert)
	delete(s.Annotations, AnnotationRetiredUntil)
	delete(s.Annotations, AnnotationRetiredKeys)
	if len(st.Retired) > 0 {
		certs := make([]*x509.Certificate, len(st.Retired))
		until, keyRefs, inKeeper := make([]string, len(st.Retired)), make([]string, len(st.Retired)), false
		for i, r := range st.Retired {
			certs[i], until[i], keyRefs[i] = r.Cert, r.Until.UTC().Format(time.RFC3339Nano), r.KeyRef
			inKeeper = inKeeper || r.KeyRef != ""
		}
		untilJSON, _ := json.Marshal(until)
		s.Data[keyRetiredCert], s.Annotations[AnnotationRetiredUntil] = encodeCerts(certs...), string(untilJSON)
		if inKeeper {
			keysJSON, _ := json.Marshal(keyRefs)
			s.Annotations[AnnotationRetiredKeys] = string(keysJSON)
		}
	}
	if st.RotateHandled != "" {
		s.Annotations[AnnotationRotateHandled] = st.RotateHandled
	}
	s.Annotations[AnnotationPhase] = string(st.phase())
	if !st.AnchorsChangedAt.IsZero() {
		s.Annotations[AnnotationAnchorsChanged] = st.AnchorsChangedAt.UTC().Format(time.RFC3339)
	}
	return nil
}

func setOrDelete(m map[string]string, key, value string) {
	if value == "" {
		delete(m, key)
		return
	}
	m[key] = value
}

// SecretTypeKeeperCA is the type of a CA Secret made for a CA whose key a keeper
// holds: certificates and where each key is, no key (a kubernetes.io/tls Secret must
// have one).
const SecretTypeKeeperCA corev1.SecretType = "trustsync.io/ca"

// newCASecret is the Secret for a freshly generated CA.
func newCASecret(namespace, name, signerName string, st *caState) (*corev1.Secret, error) {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: map[string]string{AnnotationSigner: signerName},
			Labels: map[string]string{"app.kubernetes.io/part-of": "trustsync", "app.kubernetes.io/component": "signer-ca"}},
		Type: corev1.SecretTypeTLS,
	}
	if st.Current.KeyRef != "" {
		s.Type = SecretTypeKeeperCA
	}
	return s, applyToSecret(st, s)
}
