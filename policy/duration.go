package policy

import (
	"fmt"
	"time"
)

// DurationAnnotation is cert-manager's way to ask a CSR signer for a duration; when
// present it overrides spec.expirationSeconds, as cert-manager's signers treat it.
const DurationAnnotation = "experimental.cert-manager.io/request-duration"

// Request is the duration a certificate signing request asks for.
type Request struct {
	// Duration is meaningful only when Set.
	Duration time.Duration
	Set      bool
	// FromAnnotation says the duration came from DurationAnnotation.
	FromAnnotation bool
}

// RequestedDuration reads the duration a CSR asks for: DurationAnnotation when
// present, else spec.expirationSeconds, else none.
func RequestedDuration(annotations map[string]string, expirationSeconds *int32) (Request, error) {
	if v, ok := annotations[DurationAnnotation]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return Request{}, fmt.Errorf("annotation %s has value %q, which is not a positive Go duration; use a value such as \"24h\" or \"2160h\"", DurationAnnotation, v)
		}
		return Request{Duration: d, Set: true, FromAnnotation: true}, nil
	}
	if expirationSeconds != nil {
		return Request{Duration: time.Duration(*expirationSeconds) * time.Second, Set: true}, nil
	}
	return Request{}, nil
}

// Decision is what a signer's rules make of a request.
type Decision struct {
	// Lifetime is what the certificate may live: the request, the default, or the
	// maximum when the request asked for more and the rule is Clamp.
	Lifetime time.Duration
	// Clamped says the request asked for more than the maximum and was shortened.
	Clamped bool
	// Refusal is why the request must be refused; empty when it may proceed.
	Refusal string
}

// Decide applies the signer's duration rules to a request: below upstream's 600 s
// floor or the signer's minimum is refused; above the maximum is clamped or refused
// as OverMaximum says; no request gets the default.
func (s *Signer) Decide(r Request) Decision {
	minimum := seconds(s.MinExpirationSeconds)
	maximum := seconds(s.MaxExpirationSeconds)
	switch {
	case !r.Set:
		return Decision{Lifetime: seconds(s.DefaultExpirationSeconds)}
	case r.Duration < seconds(MinimumExpirationSeconds):
		return Decision{Refusal: fmt.Sprintf("may not specify a duration less than %d seconds (10 minutes)", MinimumExpirationSeconds)}
	case r.Duration < minimum:
		return Decision{Refusal: fmt.Sprintf("requested duration %s is below the minimum %s that policy sets for signer %q; ask for at least %d seconds", r.Duration, minimum, s.SignerName, s.MinExpirationSeconds)}
	case r.Duration > maximum && s.OverMaximum == Reject:
		return Decision{Refusal: fmt.Sprintf("requested duration %s exceeds the maximum %s that policy sets for signer %q; ask for at most %d seconds", r.Duration, maximum, s.SignerName, s.MaxExpirationSeconds)}
	case r.Duration > maximum:
		return Decision{Lifetime: maximum, Clamped: true}
	default:
		return Decision{Lifetime: r.Duration}
	}
}

func seconds(n int64) time.Duration { return time.Duration(n) * time.Second }
