package objects

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"

	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/render"
)

// Payload splits a rendering's files into text keys (PEM) and binary keys
// (truststores).
func Payload(sources []v1alpha1.Source, r *render.Rendering) (data map[string]string, binary map[string][]byte) {
	data, binary = map[string]string{}, map[string][]byte{}
	// Keys holding the same anchors share one string, as their renderings share
	// one encoding: 32 keys of the public roots are one copy, not 32.
	texts := map[[sha256.Size]byte]string{}
	for _, src := range sources {
		f, ok := r.Files[src.Path]
		if !ok {
			continue
		}
		if src.FileFormat() != v1alpha1.FormatPEM {
			binary[src.Path] = f.Data
			continue
		}
		p, known := r.Paths[src.Path]
		text, seen := texts[p.Set]
		if !known || !p.Known || !seen {
			text = string(f.Data)
			if known && p.Known {
				texts[p.Set] = text
			}
		}
		data[src.Path] = text
	}
	return data, binary
}

// MaxObjectBytes is the most a ConfigMap's or Secret's data may hold: the API server
// refuses a larger one ("Request entity too large"), so trustsync never sends it.
const MaxObjectBytes = 1 << 20

// TooLarge says why data and binary cannot be written as one object, if they cannot.
func TooLarge(data map[string]string, binary map[string][]byte) error {
	n := 0
	for k, v := range data {
		n += len(k) + len(v)
	}
	for k, v := range binary {
		n += len(k) + len(v)
	}
	if n <= MaxObjectBytes {
		return nil
	}
	return fmt.Errorf("%w: the %d keys would hold %d bytes, more than one object holds (%d): name fewer sources, or have sources share a key (the public roots alone are about 200 KB)", ErrTooLarge, len(data)+len(binary), n, MaxObjectBytes)
}

// ErrTooLarge is wrapped by TooLarge's refusal: no retry can write it.
var ErrTooLarge = errors.New("too large")

// Apply applies d to a ConfigMap, or a Secret, as manager, without force: PEM as
// text data, truststores as binary (a Secret's are all bytes).
func Apply(ctx context.Context, client kubernetes.Interface, kind Kind, namespace, name, manager string, d Desired) (string, error) {
	opts := metav1.ApplyOptions{FieldManager: manager}
	if kind == Secret {
		cfg := applycorev1.Secret(name, namespace).WithData(binaryOf(d.Data, d.Binary))
		if len(d.Labels) > 0 {
			cfg.WithLabels(d.Labels)
		}
		if len(d.Annotations) > 0 {
			cfg.WithAnnotations(d.Annotations)
		}
		s, err := client.CoreV1().Secrets(namespace).Apply(ctx, cfg, opts)
		if err != nil {
			return "", err
		}
		return s.ResourceVersion, nil
	}
	cfg := applycorev1.ConfigMap(name, namespace)
	if len(d.Labels) > 0 {
		cfg.WithLabels(d.Labels)
	}
	if len(d.Annotations) > 0 {
		cfg.WithAnnotations(d.Annotations)
	}
	if len(d.Data) > 0 {
		cfg.WithData(d.Data)
	}
	if len(d.Binary) > 0 {
		cfg.WithBinaryData(d.Binary)
	}
	cm, err := client.CoreV1().ConfigMaps(namespace).Apply(ctx, cfg, opts)
	if err != nil {
		return "", err
	}
	return cm.ResourceVersion, nil
}

func binaryOf(data map[string]string, binary map[string][]byte) map[string][]byte {
	out := maps.Clone(binary)
	if out == nil {
		out = map[string][]byte{}
	}
	for k, v := range data {
		out[k] = []byte(v)
	}
	return out
}

// FieldConflict is the API server's conflict err said in the writer's words; it is
// still a conflict (apierrors.IsConflict), which no retry mends.
func FieldConflict(err error, format string, args ...any) error {
	return &fieldConflict{msg: fmt.Sprintf(format, args...), err: err}
}

type fieldConflict struct {
	msg string
	err error
}

func (e *fieldConflict) Error() string { return e.msg }
func (e *fieldConflict) Unwrap() error { return e.err }

// ConflictDetail is the API server's list of conflicting fields and their managers.
func ConflictDetail(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		var parts []string
		for _, cause := range status.Status().Details.Causes {
			parts = append(parts, cause.Message)
		}
		if len(parts) > 0 {
			return strings.Join(parts, "; ")
		}
	}
	return err.Error()
}

// Retryable says whether a failed write may succeed when simply tried again: an
// object too large, a field another manager owns (a conflict) and a namespace or
// object gone wait for a change, which the watches bring; anything else (a refusal by
// quota or webhook, a timeout, an outage) is tried again with the queue's backoff.
func Retryable(err error) bool {
	return err != nil && !errors.Is(err, ErrTooLarge) && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err)
}

// IgnoreNotFound is err, or nil when it says the object is gone.
func IgnoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
