package bundle

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"time"
	"unsafe"
)

// Anchor is one decoded trust anchor: its DER, the SHA-256 of the DER (the key a Pool
// deduplicates and orders by) and its canonical PEM block. Anchors are immutable and
// shared between decodings, so an anchor that did not change is never parsed, hashed
// or encoded again.
type Anchor struct {
	DER []byte
	Sum [sha256.Size]byte
	// NotBefore and NotAfter bound the anchor's validity (zero if der does not parse,
	// which a decoded anchor always does).
	NotBefore, NotAfter time.Time
	// Name is what people call the anchor: its subject's common name, else its first
	// organization, else empty. Kept so that naming an anchor (a truststore alias)
	// never parses it again.
	Name string
	pem  []byte
}

// setCertificate records what the anchor keeps of its parsed certificate.
func (a *Anchor) setCertificate(cert *x509.Certificate) {
	a.NotBefore, a.NotAfter = cert.NotBefore, cert.NotAfter
	a.Name = cert.Subject.CommonName
	if a.Name == "" && len(cert.Subject.Organization) > 0 {
		a.Name = cert.Subject.Organization[0]
	}
}

// NewAnchor makes an anchor of a DER certificate; the anchor keeps der, which the
// caller must not modify afterwards.
func NewAnchor(der []byte) *Anchor {
	a := newAnchor(der)
	if cert, err := x509.ParseCertificate(der); err == nil {
		a.setCertificate(cert)
	}
	return a
}

func newAnchor(der []byte) *Anchor {
	return &Anchor{DER: der, Sum: sha256.Sum256(der), pem: pem.EncodeToMemory(&pem.Block{Type: certificateBlockType, Bytes: der})}
}

// Decoding is a PEM text decoded as DecodeCertificates decodes it, with where each
// block ended, so that an edited copy of the same source can be decoded by reading
// only what the edit touched (DecodeEdited).
type Decoding struct {
	text   string
	blocks []decodedBlock
}

type decodedBlock struct {
	end    int // offset in text just past the block: where decoding resumes
	anchor *Anchor
}

// Text returns the text decoded.
func (d *Decoding) Text() string { return d.text }

// Anchors returns the decoded anchors in the order of the text.
func (d *Decoding) Anchors() []*Anchor {
	out := make([]*Anchor, len(d.blocks))
	for i, b := range d.blocks {
		out[i] = b.anchor
	}
	return out
}

// DecodeEdited decodes text with DecodeCertificates' rules. prev, when not nil, is the
// decoding of an earlier text of the same source (a bundle before an edit): the blocks
// text shares with it, before and after the edited region, are taken from prev
// instead of being decoded, base64-decoded, parsed and hashed again. A rotation that
// changes one anchor of a megabyte bundle then costs one certificate's work, not two
// thousand (docs/benchmarks.md).
//
// The result is the same as without prev, errors included: pem.Decode reads a block
// from where the previous one ended up to the end of its END line and no further, so
// a block whose bytes and starting point are unchanged decodes as before; and once
// decoding reaches a point from which the rest of text equals the rest of prev's text,
// what follows is prev's. TestDecodeEdited_DecodesAsFromScratch and FuzzDecodeEdited
// hold it to that.
func DecodeEdited(text string, prev *Decoding) (*Decoding, error) {
	d := &Decoding{text: text}
	start := 0
	var prefix, suffix int
	if prev != nil {
		prefix, suffix = commonAffixes(prev.text, text)
		// The leading blocks that lie wholly in the shared prefix are unchanged, unless
		// one ended at the end of prev's text without a newline: how pem.Decode read
		// its END line depended on the text ending there.
		for _, b := range prev.blocks {
			if b.end > prefix || prev.text[b.end-1] != '\n' {
				break
			}
			d.blocks = append(d.blocks, b)
			start = b.end
		}
	}
	// A view of text, not a copy: copying a megabyte on every edit cost more than the
	// edit. pem.Decode only reads its input (what it returns is freshly decoded or a
	// subslice of the input that is read in turn), so the string's immutability holds.
	data := unsafe.Slice(unsafe.StringData(text), len(text))
	pos := start
	for {
		if prev != nil && d.resume(prev, pos, suffix) {
			return d, nil
		}
		cert, rest, err := nextCertificate(data[pos:], len(d.blocks))
		if err != nil {
			return nil, err
		}
		if cert == nil {
			return d, nil
		}
		pos = len(data) - len(rest)
		a := newAnchor(cert.Raw)
		a.setCertificate(cert)
		d.blocks = append(d.blocks, decodedBlock{end: pos, anchor: a})
	}
}

// resume finishes d from prev when the rest of d's text from pos is the rest of prev's
// text from one of prev's block boundaries (or from its start): decoding would go on
// exactly as it went on there.
func (d *Decoding) resume(prev *Decoding, pos, suffix int) bool {
	remaining := len(d.text) - pos
	if remaining > suffix {
		return false
	}
	shift := len(d.text) - len(prev.text)
	// prev's boundary at the same distance from the end: its start, or a block's end
	// (block ends only grow, so a binary search finds it).
	at := len(prev.text) - remaining
	from := 0
	if at != 0 {
		i, found := slices.BinarySearchFunc(prev.blocks, at, func(b decodedBlock, at int) int { return b.end - at })
		if !found {
			return false
		}
		from = i + 1
	}
	for _, b := range prev.blocks[from:] {
		d.blocks = append(d.blocks, decodedBlock{end: b.end + shift, anchor: b.anchor})
	}
	return true
}

// commonAffixes returns the lengths of the longest common prefix of a and b and of
// the longest common suffix of what remains of them after it.
func commonAffixes(a, b string) (prefix, suffix int) {
	n := min(len(a), len(b))
	// Compare in large chunks first: memequal is far faster than a byte loop.
	for step := 4096; step >= 1; step /= 16 {
		for prefix+step <= n && a[prefix:prefix+step] == b[prefix:prefix+step] {
			prefix += step
		}
	}
	m := n - prefix
	for step := 4096; step >= 1; step /= 16 {
		for suffix+step <= m && a[len(a)-suffix-step:len(a)-suffix] == b[len(b)-suffix-step:len(b)-suffix] {
			suffix += step
		}
	}
	return prefix, suffix
}
