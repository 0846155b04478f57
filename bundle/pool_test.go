package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/pem"
	"slices"
	"testing"

	"github.com/trustsync/trustsync/test/fixtures"
)

func poolOf(t *testing.T, pems ...string) *Pool {
	t.Helper()
	p := NewPool()
	for _, data := range pems {
		if err := p.AddPEM([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestPool_DedupesByDER(t *testing.T) {
	p := poolOf(t, fixtures.Bundle(caA, caB), fixtures.Bundle(caB), "text\n"+fixtures.Bundle(caA))
	if p.Len() != 2 {
		t.Fatalf("Len() = %d, want 2", p.Len())
	}
	if p.AddDER(caA.Cert.Raw) {
		t.Error("AddDER of a known anchor reported it new")
	}
}

func TestPool_SameSetSameBytes(t *testing.T) {
	orders := [][]*fixtures.Cert{{caA, caB, caC}, {caC, caB, caA}, {caB, caA, caC, caA}}
	var first []byte
	for _, order := range orders {
		got := poolOf(t, fixtures.Bundle(order...)).PEM()
		if first == nil {
			first = got
		} else if !bytes.Equal(got, first) {
			t.Fatalf("order %v gave different bytes", order)
		}
	}
}

func TestPool_SetSumIdentifiesTheSetAlone(t *testing.T) {
	abc := poolOf(t, fixtures.Bundle(caA, caB, caC)).SetSum()
	for _, tc := range []struct {
		name string
		pool *Pool
		same bool
	}{
		{"another order", poolOf(t, fixtures.Bundle(caC, caA, caB)), true},
		{"duplicates and text between blocks", poolOf(t, fixtures.Bundle(caB, caA), "# comment\n"+fixtures.Bundle(caC, caA)), true},
		{"one anchor fewer", poolOf(t, fixtures.Bundle(caA, caB)), false},
		{"one anchor replaced", poolOf(t, fixtures.Bundle(caA, caB, fixtures.CA("d"))), false},
		{"empty", NewPool(), false},
	} {
		if got := tc.pool.SetSum() == abc; got != tc.same {
			t.Errorf("%s: same SetSum = %v, want %v", tc.name, got, tc.same)
		}
	}
}

func TestPool_OrdersBySHA256OfDERAscending(t *testing.T) {
	p := poolOf(t, fixtures.Bundle(caA, caB, caC))
	ders := p.DER()
	if !slices.IsSortedFunc(ders, func(a, b []byte) int {
		ha, hb := sha256.Sum256(a), sha256.Sum256(b)
		return bytes.Compare(ha[:], hb[:])
	}) {
		t.Error("DER() is not sorted by SHA-256")
	}
}

func TestPool_PEMIsStandardEncodingWithoutHeaders(t *testing.T) {
	headered := fixtures.Block("CERTIFICATE", caA.Cert.Raw, map[string]string{"Note": "dropped"})
	p := poolOf(t, "preamble\n"+headered+"between\n"+fixtures.Bundle(caB))
	var want bytes.Buffer
	for _, der := range p.DER() {
		_ = pem.Encode(&want, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	if got := p.PEM(); !bytes.Equal(got, want.Bytes()) {
		t.Errorf("PEM() =\n%s\nwant\n%s", got, want.Bytes())
	}
	if errs := ValidateTrustBundle(trustBundlePath, string(p.PEM())); len(errs) != 0 {
		t.Errorf("merged output is not a valid trust bundle: %v", errs)
	}
}

func TestPool_EmptyPoolEncodesToNothing(t *testing.T) {
	if got := NewPool().PEM(); len(got) != 0 {
		t.Errorf("PEM() = %q, want empty", got)
	}
}

func TestPool_AddPEMIsAllOrNothing(t *testing.T) {
	p := poolOf(t, fixtures.Bundle(caA))
	before := p.PEM()
	if err := p.AddPEM([]byte(fixtures.Bundle(caB) + keyPB)); !IsInvalidPEM(err) {
		t.Fatalf("AddPEM with a key: err = %v, want InvalidPEMError", err)
	}
	if !bytes.Equal(p.PEM(), before) {
		t.Error("a refused source changed the pool")
	}
}
