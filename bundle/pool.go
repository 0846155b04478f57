package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/pem"
	"slices"
)

// Pool is a set of trust anchors, deduplicated by DER bytes. Its encoding orders
// anchors by the SHA-256 of their DER, ascending, so the same set always gives the
// same bytes: across restarts, replicas and the order sources arrived in. (The
// kubelet shuffles instead, which rewrites files for no reason.)
type Pool struct {
	anchors map[[sha256.Size]byte][]byte
}

// NewPool returns an empty pool.
func NewPool() *Pool {
	return &Pool{anchors: map[[sha256.Size]byte][]byte{}}
}

// AddDER adds one certificate and reports whether it was new. The pool keeps der;
// the caller must not modify it afterwards.
func (p *Pool) AddDER(der []byte) bool {
	sum := sha256.Sum256(der)
	if _, ok := p.anchors[sum]; ok {
		return false
	}
	p.anchors[sum] = der
	return true
}

// AddPEM adds every certificate in data, decoded as DecodeCertificates does. It is all
// or nothing: on error the pool is unchanged.
func (p *Pool) AddPEM(data []byte) error {
	ders, err := DecodeCertificates(data)
	if err != nil {
		return err
	}
	for _, der := range ders {
		p.AddDER(der)
	}
	return nil
}

// AddPool adds every anchor of other.
func (p *Pool) AddPool(other *Pool) {
	for sum, der := range other.anchors {
		p.anchors[sum] = der
	}
}

// Len returns the number of distinct anchors.
func (p *Pool) Len() int { return len(p.anchors) }

// DER returns the anchors in the pool's canonical order.
func (p *Pool) DER() [][]byte {
	sums := make([][sha256.Size]byte, 0, len(p.anchors))
	for sum := range p.anchors {
		sums = append(sums, sum)
	}
	slices.SortFunc(sums, func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
	out := make([][]byte, len(sums))
	for i, sum := range sums {
		out[i] = p.anchors[sum]
	}
	return out
}

// PEM encodes the anchors in canonical order as CERTIFICATE blocks (64-column base64,
// a newline after each block), into one buffer sized up front.
func (p *Pool) PEM() []byte {
	ders := p.DER()
	size := 0
	for _, der := range ders {
		// Header and footer lines, base64 text, and one newline per 64 columns.
		b64 := base64.StdEncoding.EncodedLen(len(der))
		size += len("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n") + b64 + b64/64 + 1
	}
	var buf bytes.Buffer
	buf.Grow(size)
	for _, der := range ders {
		// Writing to a bytes.Buffer cannot fail.
		_ = pem.Encode(&buf, &pem.Block{Type: certificateBlockType, Bytes: der})
	}
	return buf.Bytes()
}
