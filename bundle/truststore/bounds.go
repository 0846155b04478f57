package truststore

import (
	"crypto/fips140"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
)

// A truststore is decoded from bytes a tenant may have written (a key of an annotated
// ConfigMap, a file in a pod's volume), and both libraries trust what the bytes say of
// themselves: go-pkcs12 derives keys with as many iterations as the file asks for (2^62
// spins a core for ever) and keystore-go allocates as many bytes or chain entries as a
// length says (4,294,967,295 chain certificates is 172 GB). Neither takes a limit, so
// every store is walked here first, with lengths checked against the bytes that are
// really there and iteration counts against MaxIterations, and only a store within
// bounds reaches a library.
const (
	// MaxStoreBytes bounds a store decoded: four times the largest ClusterTrustBundle.
	MaxStoreBytes = 4 << 20
	// MaxIterations bounds every key derivation a PKCS#12 store asks for (its MAC's
	// and its encryption's): ten times Java's default (10,000) and fifty times
	// OpenSSL's and go-pkcs12's (2,048), so that a store any tool writes by default
	// opens, and the costliest one a tenant can write takes milliseconds.
	MaxIterations = 100_000
)

// ErrFIPS is wrapped by every refusal of a store that strict FIPS 140-3 mode
// (GODEBUG=fips140=only) cannot read: a JKS store (a SHA-1 digest) and a PKCS#12 store
// with SHA-1 in its MAC or its encryption. The mode would panic in the library.
var ErrFIPS = errors.New("truststore not readable in FIPS 140-3 mode")

// fipsEnforced says whether this process runs in strict FIPS 140-3 mode; a variable
// so tests can set it.
var fipsEnforced = fips140.Enforced

func notInFIPSMode(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrFIPS}, args...)...)
}

// ErrOutOfBounds is wrapped by every refusal of a store that asks for more than the
// bounds allow, as opposed to one that is merely malformed or wrongly keyed.
var ErrOutOfBounds = errors.New("truststore out of bounds")

func outOfBounds(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrOutOfBounds}, args...)...)
}

func checkSize(data []byte) error {
	if len(data) > MaxStoreBytes {
		return outOfBounds("%d bytes, more than the %d a store may have", len(data), MaxStoreBytes)
	}
	return nil
}

func checkIterations(what string, n int) error {
	if n > MaxIterations {
		return outOfBounds("%s asks for %d iterations, more than the %d allowed: re-encode the store with fewer", what, n, MaxIterations)
	}
	return nil
}

// The PKCS#12 structures (RFC 7292, RFC 8018, RFC 9579) as far as they carry an
// iteration count; everything else is left raw for the library to read.
type (
	pfx struct {
		Version  int
		AuthSafe contentInfo
		MacData  macData `asn1:"optional"`
	}
	contentInfo struct {
		ContentType asn1.ObjectIdentifier
		Content     asn1.RawValue `asn1:"tag:0,explicit,optional"`
	}
	macData struct {
		Mac        digestInfo
		MacSalt    []byte
		Iterations int `asn1:"optional,default:1"`
	}
	digestInfo struct {
		Algorithm pkix.AlgorithmIdentifier
		Digest    []byte
	}
	encryptedData struct {
		Version              int
		EncryptedContentInfo encryptedContentInfo
	}
	encryptedContentInfo struct {
		ContentType                asn1.ObjectIdentifier
		ContentEncryptionAlgorithm pkix.AlgorithmIdentifier
		EncryptedContent           asn1.RawValue `asn1:"tag:0,optional"`
	}
	// pbes2Params is PBES2's and, with the MAC algorithm second, PBMAC1's.
	pbes2Params struct {
		Kdf    pkix.AlgorithmIdentifier
		Scheme pkix.AlgorithmIdentifier
	}
	pbkdf2Params struct {
		Salt       asn1.RawValue
		Iterations int
		Rest       asn1.RawValue `asn1:"optional"`
	}
	pbeParams struct {
		Salt       []byte
		Iterations int
	}
)

var (
	oidData          = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}
	oidEncryptedData = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 6}
	oidPBES2         = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 13}
	oidPBMAC1        = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 14}
	oidPBKDF2        = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 12}
	oidSHA1          = asn1.ObjectIdentifier{1, 3, 14, 3, 2, 26}
	// oidPKCS12PBE is the arc of PKCS#12's own password-based encryptions.
	oidPKCS12PBE = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 12, 1}
)

// checkPKCS12 refuses a PKCS#12 store that is too large or asks for more key
// derivation than MaxIterations anywhere the library would derive a key. A structure
// it cannot read is left for the library to refuse with its own words.
func checkPKCS12(data []byte) error {
	if err := checkSize(data); err != nil {
		return err
	}
	var p pfx
	if _, err := asn1.Unmarshal(data, &p); err != nil {
		return nil
	}
	if p.MacData.Mac.Algorithm.Algorithm != nil {
		if fipsEnforced() && p.MacData.Mac.Algorithm.Algorithm.Equal(oidSHA1) {
			return notInFIPSMode("its MAC is HMAC-SHA-1, which FIPS 140-3 mode does not allow: re-encode it with a modern profile (PBMAC1 for FIPS Java)")
		}
		if p.MacData.Mac.Algorithm.Algorithm.Equal(oidPBMAC1) {
			var params pbes2Params
			if _, err := asn1.Unmarshal(p.MacData.Mac.Algorithm.Parameters.FullBytes, &params); err != nil {
				return nil
			}
			if err := checkPBKDF2("the MAC (PBMAC1)", params.Kdf); err != nil {
				return err
			}
		} else if err := checkIterations("the MAC", p.MacData.Iterations); err != nil {
			return err
		}
	}
	if !p.AuthSafe.ContentType.Equal(oidData) {
		return nil
	}
	var content []byte
	if _, err := asn1.Unmarshal(p.AuthSafe.Content.Bytes, &content); err != nil {
		return nil
	}
	var safe []contentInfo
	if _, err := asn1.Unmarshal(content, &safe); err != nil {
		return nil
	}
	for i, ci := range safe {
		if !ci.ContentType.Equal(oidEncryptedData) {
			continue
		}
		var ed encryptedData
		if _, err := asn1.Unmarshal(ci.Content.Bytes, &ed); err != nil {
			return nil
		}
		alg := ed.EncryptedContentInfo.ContentEncryptionAlgorithm
		what := fmt.Sprintf("the encryption of content %d", i+1)
		switch {
		case alg.Algorithm.Equal(oidPBES2):
			var params pbes2Params
			if _, err := asn1.Unmarshal(alg.Parameters.FullBytes, &params); err != nil {
				return nil
			}
			if err := checkPBKDF2(what, params.Kdf); err != nil {
				return err
			}
		case len(alg.Algorithm) == len(oidPKCS12PBE)+1 && alg.Algorithm[:len(oidPKCS12PBE)].Equal(oidPKCS12PBE):
			if fipsEnforced() {
				return notInFIPSMode("%s is PKCS#12's legacy password-based encryption (SHA-1, DES or RC2), which FIPS 140-3 mode does not allow: re-encode it with a modern profile", what)
			}
			var params pbeParams
			if _, err := asn1.Unmarshal(alg.Parameters.FullBytes, &params); err != nil {
				return nil
			}
			if err := checkIterations(what, params.Iterations); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkPBKDF2 reads the iteration count of a key derivation, if it is PBKDF2's.
func checkPBKDF2(what string, kdf pkix.AlgorithmIdentifier) error {
	if !kdf.Algorithm.Equal(oidPBKDF2) {
		return nil
	}
	var p pbkdf2Params
	if _, err := asn1.Unmarshal(kdf.Parameters.FullBytes, &p); err != nil {
		return nil
	}
	return checkIterations(what, p.Iterations)
}

// JKS, as keystore-go reads it: a magic, a version (1 or 2), an entry count, the
// entries, a 20-byte SHA-1 digest. An entry is a tag (1: private key, 2: trusted
// certificate), an alias, a timestamp, then for a private key its encrypted bytes and
// a chain of certificates, for a trusted certificate one certificate; a certificate is
// (version 2) a type string, then its length and bytes.
const (
	jksMagic      = 0xfeedfeed
	jksDigestSize = 20
)

// checkJKS walks a JKS store checking every count and length against the bytes that
// follow it, so that the library, which allocates what a length says before reading,
// is given only a store whose lengths are true.
func checkJKS(data []byte) error {
	if err := checkSize(data); err != nil {
		return err
	}
	r := jksReader{data: data}
	if r.u32() != jksMagic {
		return nil // not JKS: the library says so
	}
	version := r.u32()
	if version != 1 && version != 2 {
		return nil
	}
	entries := r.u32()
	for i := uint32(0); i < entries && r.err == nil; i++ {
		tag := r.u32()
		r.skip(uint64(r.u16()), "alias of entry %d", i+1)
		r.header(8) // timestamp
		switch tag {
		case 1:
			r.skip(uint64(r.u32()), "key of entry %d", i+1)
			chain := r.u32()
			// Each certificate takes at least four bytes (its length): a count
			// that the bytes left cannot hold is a lie, refused before the
			// library reserves room for it.
			if r.err == nil && uint64(chain)*4 > uint64(r.left()) {
				return outOfBounds("JKS entry %d declares %d chain certificates, which the %d bytes left cannot hold", i+1, chain, r.left())
			}
			for j := uint32(0); j < chain && r.err == nil; j++ {
				r.certificate(version, i)
			}
		case 2:
			r.certificate(version, i)
		default:
			return nil
		}
	}
	if errors.Is(r.err, errTruncated) || (r.err == nil && r.left() < jksDigestSize) {
		return nil // truncated: the library says where
	}
	return r.err
}

var errTruncated = errors.New("truncated")

type jksReader struct {
	data []byte
	off  int
	err  error
}

func (r *jksReader) left() int { return len(r.data) - r.off }

func (r *jksReader) take(n uint64, what string, args ...any) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(r.left()) {
		r.err = outOfBounds("JKS "+what+" declares %d bytes, more than the %d left", append(args, n, r.left())...)
		return nil
	}
	b := r.data[r.off : r.off+int(n)]
	r.off += int(n)
	return b
}

func (r *jksReader) skip(n uint64, what string, args ...any) { r.take(n, what, args...) }

// header reads n bytes of a fixed-size field.
func (r *jksReader) header(n int) []byte {
	if r.err == nil && r.left() < n {
		r.err = errTruncated
	}
	if r.err != nil {
		return make([]byte, n)
	}
	r.off += n
	return r.data[r.off-n : r.off]
}

func (r *jksReader) u16() uint16 { return binary.BigEndian.Uint16(r.header(2)) }

func (r *jksReader) u32() uint32 { return binary.BigEndian.Uint32(r.header(4)) }

func (r *jksReader) certificate(version, entry uint32) {
	if version == 2 {
		r.skip(uint64(r.u16()), "certificate type of entry %d", entry+1)
	}
	r.skip(uint64(r.u32()), "certificate of entry %d", entry+1)
}
