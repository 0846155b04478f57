package bundle

import (
	"bytes"
	"crypto/sha256"
	"slices"
	"time"
)

// Pool is a set of trust anchors, deduplicated by DER bytes. Its encoding orders
// anchors by the SHA-256 of their DER, ascending, so the same set always gives the
// same bytes: across restarts, replicas and the order sources arrived in. (The
// kubelet shuffles instead, which rewrites files for no reason.)
type Pool struct {
	anchors map[[sha256.Size]byte]*Anchor
	// order is the anchors in canonical order, sorted once for every reader (a sync
	// asks for the set's sum, the anchors and the PEM of one pool) until the next add.
	order []*Anchor
}

// NewPool returns an empty pool.
func NewPool() *Pool {
	return &Pool{anchors: map[[sha256.Size]byte]*Anchor{}}
}

// AddDER adds one certificate and reports whether it was new. The pool keeps der;
// the caller must not modify it afterwards.
func (p *Pool) AddDER(der []byte) bool {
	sum := sha256.Sum256(der)
	if _, ok := p.anchors[sum]; ok {
		return false
	}
	p.anchors[sum] = NewAnchor(der)
	p.order = nil
	return true
}

// AddAnchor adds a decoded anchor, hashed and encoded already, and reports whether it
// was new.
func (p *Pool) AddAnchor(a *Anchor) bool {
	if _, ok := p.anchors[a.Sum]; ok {
		return false
	}
	p.anchors[a.Sum] = a
	p.order = nil
	return true
}

// AddPEM adds every certificate in data, decoded as DecodeCertificates does. It is all
// or nothing: on error the pool is unchanged.
func (p *Pool) AddPEM(data []byte) error {
	d, err := DecodeEdited(string(data), nil)
	if err != nil {
		return err
	}
	for _, a := range d.Anchors() {
		p.AddAnchor(a)
	}
	return nil
}

// EarliestNotAfter is when the first of the pool's anchors expires (zero when empty).
func (p *Pool) EarliestNotAfter() time.Time {
	var earliest time.Time
	for _, a := range p.anchors {
		if !a.NotAfter.IsZero() && (earliest.IsZero() || a.NotAfter.Before(earliest)) {
			earliest = a.NotAfter
		}
	}
	return earliest
}

// Len returns the number of distinct anchors.
func (p *Pool) Len() int { return len(p.anchors) }

// sorted returns the anchors in the pool's canonical order; callers must not modify it.
func (p *Pool) sorted() []*Anchor {
	if p.order != nil || len(p.anchors) == 0 {
		return p.order
	}
	out := make([]*Anchor, 0, len(p.anchors))
	for _, a := range p.anchors {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *Anchor) int { return bytes.Compare(a.Sum[:], b.Sum[:]) })
	p.order = out
	return out
}

// Anchors returns the anchors in the pool's canonical order.
func (p *Pool) Anchors() []*Anchor { return slices.Clone(p.sorted()) }

// SetSum identifies the pool's set of anchors: the SHA-256 of their sums in canonical
// order. Two pools have the same SetSum exactly when they hold the same anchors, in
// whatever order and with whatever duplicates they were added.
func (p *Pool) SetSum() [sha256.Size]byte {
	h := sha256.New()
	for _, a := range p.sorted() {
		h.Write(a.Sum[:])
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// DER returns the anchors in the pool's canonical order.
func (p *Pool) DER() [][]byte {
	anchors := p.sorted()
	out := make([][]byte, len(anchors))
	for i, a := range anchors {
		out[i] = a.DER
	}
	return out
}

// PEM encodes the anchors in canonical order as CERTIFICATE blocks (64-column base64,
// a newline after each block): each anchor's block was encoded when it was decoded,
// so this only joins them.
func (p *Pool) PEM() []byte {
	anchors := p.sorted()
	size := 0
	for _, a := range anchors {
		size += len(a.pem)
	}
	out := make([]byte, 0, size)
	for _, a := range anchors {
		out = append(out, a.pem...)
	}
	return out
}
