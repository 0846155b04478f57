package bundle

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxTrustBundleSize is the largest spec.trustBundle the API server accepts.
const MaxTrustBundleSize = 1 << 20

const (
	certificateBlockType = "CERTIFICATE"
	// omittedValue is what the API server shows instead of a bundle in its errors:
	// echoing a megabyte of PEM back helps nobody.
	omittedValue = "<value omitted>"
)

// ValidateTrustBundle applies the API server's rules for spec.trustBundle, in its
// order and with its messages: size first (and nothing else when too long), then
// every PEM block (type, headers, X.509, CA bit), and only when every block is good,
// that there is at least one anchor and no anchor appears twice.
func ValidateTrustBundle(fldPath *field.Path, trustBundle string) field.ErrorList {
	if len(trustBundle) > MaxTrustBundleSize {
		return field.ErrorList{field.TooLong(fldPath, "", MaxTrustBundleSize)}
	}

	var errs field.ErrorList
	// The API server keeps indices per DER in a map and reports duplicates in map
	// order; we keep first-seen order so the same input gives the same messages.
	indices := map[string][]int{}
	var order []string
	rest := []byte(trustBundle)
	for i := 0; ; i++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if msg := checkAnchorBlock(block); msg != "" {
			errs = append(errs, field.Invalid(fldPath, omittedValue, fmt.Sprintf("entry %d %s", i, msg)))
			continue
		}
		der := string(block.Bytes)
		if _, seen := indices[der]; !seen {
			order = append(order, der)
		}
		indices[der] = append(indices[der], i)
	}
	if len(errs) > 0 {
		return errs
	}

	if len(order) == 0 {
		errs = append(errs, field.Invalid(fldPath, omittedValue, "at least one trust anchor must be provided"))
	}
	for _, der := range order {
		if idx := indices[der]; len(idx) > 1 {
			errs = append(errs, field.Invalid(fldPath, omittedValue, fmt.Sprintf("duplicate trust anchor (indices %v)", idx)))
		}
	}
	return errs
}

// checkAnchorBlock returns what is wrong with one PEM block as a trust anchor, in the
// API server's words, or "" when it is a usable CA certificate.
func checkAnchorBlock(block *pem.Block) string {
	if block.Type != certificateBlockType {
		return fmt.Sprintf("has bad block type: %v", block.Type)
	}
	if len(block.Headers) != 0 {
		return "has PEM block headers"
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "does not parse as X.509"
	}
	if !cert.IsCA {
		return "does not have the CA bit set"
	}
	if !cert.BasicConstraintsValid {
		return "has invalid basic constraints"
	}
	return ""
}

// InvalidPEMError says why PEM data from a source was refused. Callers that must keep
// their last good state tell it apart from transient errors with errors.As.
type InvalidPEMError struct {
	// Index is the 0-based position of the offending PEM block, or -1 when the
	// problem is the data as a whole.
	Index  int
	Reason string
}

func (e *InvalidPEMError) Error() string {
	if e.Index < 0 {
		return e.Reason
	}
	return fmt.Sprintf("PEM block %d %s", e.Index, e.Reason)
}

// IsInvalidPEM reports whether err (or anything it wraps) is an InvalidPEMError.
func IsInvalidPEM(err error) bool {
	var target *InvalidPEMError
	return errors.As(err, &target)
}

// DecodeCertificates returns the DER of every certificate in data, in order, for
// merging into a trust file. It is lenient where upstream's projection is lenient
// (PEM headers and text between blocks are dropped) and strict where leniency would
// be dangerous: any block that is not a CERTIFICATE (a private key in a TLS Secret,
// say) or does not parse as X.509 refuses the whole input, so keys and garbage never
// reach a trust file. Input with no certificate at all returns an empty slice and no
// error; whether that is acceptable is the caller's call.
func DecodeCertificates(data []byte) ([][]byte, error) {
	var ders [][]byte
	err := eachCertificate(data, func(cert *x509.Certificate) { ders = append(ders, cert.Raw) })
	if err != nil {
		return nil, err
	}
	return slices.Clip(ders), nil
}

// ParseCertificates is DecodeCertificates for callers that need the parsed
// certificates (their subjects and expiry dates), with the same rules.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	if err := eachCertificate(data, func(cert *x509.Certificate) { certs = append(certs, cert) }); err != nil {
		return nil, err
	}
	return certs, nil
}

func eachCertificate(data []byte, visit func(*x509.Certificate)) error {
	rest := data
	for i := 0; ; i++ {
		cert, next, err := nextCertificate(rest, i)
		if cert == nil || err != nil {
			return err
		}
		visit(cert)
		rest = next
	}
}

// nextCertificate decodes the next PEM block of data, the i-th of its text, with the
// trust sources' rules: a block that is not a CERTIFICATE, or does not parse as X.509,
// refuses the source. At the end of the blocks it returns no certificate.
func nextCertificate(data []byte, i int) (*x509.Certificate, []byte, error) {
	block, rest := pem.Decode(data)
	if block == nil {
		return nil, nil, nil
	}
	if block.Type != certificateBlockType {
		return nil, nil, &InvalidPEMError{Index: i, Reason: fmt.Sprintf("has type %q; only CERTIFICATE blocks are allowed in trust sources, so the whole source was refused", block.Type)}
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, &InvalidPEMError{Index: i, Reason: fmt.Sprintf("does not parse as X.509: %v", err)}
	}
	return cert, rest, nil
}
