package bundle

import (
	"strings"
	"time"
)

// RotationAnnotation, on a signer's live bundle, is where trustsync's signer says where
// its CA rotation stands (RotationStatus as JSON): public, as the bundle is, so that
// anyone may ask `kubectl trustsync rotation` without reading the CA's Secret.
const RotationAnnotation = "trustsync.io/rotation"

// RotationStatus is a signer's CA rotation as its live bundle tells it.
// RotateRequestedAnnotation, on a signer's CA Secret, asks it for a new CA now (its
// value the time asked); kubectl trustsync rotate writes it.
const RotateRequestedAnnotation = "trustsync.io/rotate-requested-at"

// RotationStable is the phase of a signer with one signing CA and nothing pending: no
// rotation under way.
const RotationStable = "Stable"

type RotationStatus struct {
	// Phase is Stable, Publishing or Waiting.
	Phase string `json:"phase"`
	// Propagation is how a new CA waits to sign: "observed" (until every pod
	// selecting the bundle is seen holding it, or MaxWaitUntil) or "timed".
	Propagation string `json:"propagation"`
	// CurrentCA signs now; NewCA, while rotating, is published and waits. Each is
	// the SHA-256 of the CA certificate's DER, lowercase hex.
	CurrentCA string `json:"currentCA"`
	NewCA     string `json:"newCA,omitempty"`
	// CurrentKey and NewKey say where each one's private key lives: "secret" (the CA
	// Secret holds it), or its place in the signer's keeper (pkcs11:token=...;object=...,
	// awskms:key-id=...), never more than the key's name.
	CurrentKey string `json:"currentKey,omitempty"`
	NewKey     string `json:"newKey,omitempty"`
	// PublishedAt is when NewCA was published; SignsBy is when it signs at the
	// latest (the timed window's end, or observed propagation's maximum wait).
	PublishedAt *time.Time `json:"publishedAt,omitempty"`
	SignsBy     *time.Time `json:"signsBy,omitempty"`
	// FloorUntil, with observed propagation, is the earliest NewCA signs when some
	// consumer of the bundle cannot be observed or none is observed at all (the
	// signer's --ca-propagation-min-wait after PublishedAt).
	FloorUntil *time.Time `json:"floorUntil,omitempty"`
	// SkipPods are the pods an operator told the rotation not to wait for (the CA
	// Secret's trustsync.io/rotation-skip-pods): namespace/pod, or namespace/*.
	SkipPods []string `json:"skipPods,omitempty"`
	// CASecret is the signer's CA Secret, namespace/name: where a rotation is asked
	// for (kubectl trustsync rotate annotates it).
	CASecret string `json:"caSecret,omitempty"`
}

// ParsePodList reads a comma-separated list of namespace/pod (or namespace/*),
// dropping blanks and anything that is not of that shape.
func ParsePodList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		ns, pod, ok := strings.Cut(item, "/")
		if ok && ns != "" && pod != "" && !strings.Contains(pod, "/") {
			out = append(out, item)
		}
	}
	return out
}
