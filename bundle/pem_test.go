package bundle

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trustsync/trustsync/test/fixtures"
)

var (
	caA   = fixtures.CA("anchor A")
	caB   = fixtures.CA("anchor B")
	caC   = fixtures.CA("anchor C")
	leaf  = fixtures.MustNew(fixtures.Options{CommonName: "leaf", Leaf: true, Parent: caA})
	noBC  = fixtures.MustNew(fixtures.Options{CommonName: "no basic constraints", NoBasicConstraints: true})
	keyPB = string(caA.KeyPEM())
)

func messages(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

func invalid(detail string) string {
	return `spec.trustBundle: Invalid value: "<value omitted>": ` + detail
}

func TestValidateTrustBundle(t *testing.T) {
	// padTo makes a bundle of exactly n bytes: a valid anchor followed by text.
	padTo := func(n int) string {
		b := fixtures.Bundle(caA)
		return b + strings.Repeat("x", n-len(b))
	}
	tests := []struct {
		name   string
		bundle string
		want   []string
	}{
		{name: "one CA certificate is valid", bundle: fixtures.Bundle(caA)},
		{name: "several distinct CA certificates are valid", bundle: fixtures.Bundle(caA, caB, caC)},
		{name: "text between and around blocks is allowed", bundle: "# corp roots\n" + fixtures.Bundle(caA) + "comment\n" + fixtures.Bundle(caB) + "trailer"},
		{name: "expired anchors are not checked", bundle: fixtures.Bundle(fixtures.MustNew(fixtures.Options{NotAfter: fixtures.CA("x").Cert.NotBefore}))},
		{name: "exactly 1 MiB is within the limit", bundle: padTo(MaxTrustBundleSize)},
		{
			name:   "over 1 MiB is too long and nothing else is checked",
			bundle: padTo(MaxTrustBundleSize+1) + keyPB,
			want:   []string{"spec.trustBundle: Too long: may not be more than 1048576 bytes"},
		},
		{name: "empty bundle has no anchor", bundle: "", want: []string{invalid("at least one trust anchor must be provided")}},
		{name: "text alone has no anchor", bundle: "no PEM here\n", want: []string{invalid("at least one trust anchor must be provided")}},
		{
			name:   "a private key block has a bad block type",
			bundle: fixtures.Bundle(caA) + keyPB,
			want:   []string{invalid("entry 1 has bad block type: PRIVATE KEY")},
		},
		{
			name:   "a block with headers is refused",
			bundle: fixtures.Block("CERTIFICATE", caA.Cert.Raw, map[string]string{"Proc-Type": "4,ENCRYPTED"}),
			want:   []string{invalid("entry 0 has PEM block headers")},
		},
		{
			name:   "a CERTIFICATE block that is not X.509 does not parse",
			bundle: fixtures.Bundle(caA) + fixtures.Block("CERTIFICATE", []byte("garbage"), nil),
			want:   []string{invalid("entry 1 does not parse as X.509")},
		},
		{name: "a leaf certificate does not have the CA bit set", bundle: fixtures.Bundle(leaf), want: []string{invalid("entry 0 does not have the CA bit set")}},
		{
			name:   "a certificate without basic constraints does not have the CA bit set",
			bundle: fixtures.Bundle(noBC),
			want:   []string{invalid("entry 0 does not have the CA bit set")},
		},
		{
			name:   "every bad entry is reported, and then duplicates and emptiness are not",
			bundle: keyPB + fixtures.Bundle(leaf, leaf) + fixtures.Block("CERTIFICATE", []byte{1}, nil),
			want: []string{
				invalid("entry 0 has bad block type: PRIVATE KEY"),
				invalid("entry 1 does not have the CA bit set"),
				invalid("entry 2 does not have the CA bit set"),
				invalid("entry 3 does not parse as X.509"),
			},
		},
		{
			name:   "a repeated anchor is a duplicate with all its indices",
			bundle: fixtures.Bundle(caA, caB, caA, caA),
			want:   []string{invalid("duplicate trust anchor (indices [0 2 3])")},
		},
		{
			name:   "several duplicates are reported in order of first appearance",
			bundle: fixtures.Bundle(caB, caA, caA, caB),
			want:   []string{invalid("duplicate trust anchor (indices [0 3])"), invalid("duplicate trust anchor (indices [1 2])")},
		},
		{
			name:   "duplicates are found by DER, whatever the text around them",
			bundle: fixtures.Bundle(caA) + "between\n" + fixtures.Bundle(caA),
			want:   []string{invalid("duplicate trust anchor (indices [0 1])")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := messages(ValidateTrustBundle(trustBundlePath, tc.bundle))
			if !slices.Equal(got, tc.want) {
				t.Errorf("ValidateTrustBundle() =\n  %q\nwant\n  %q", got, tc.want)
			}
		})
	}
}

func TestDecodeCertificates(t *testing.T) {
	tests := []struct {
		name      string
		data      string
		wantCount int
		wantErr   string
	}{
		{name: "certificates come back in order", data: fixtures.Bundle(caA, caB), wantCount: 2},
		{name: "headers and text between blocks are dropped", data: "head\n" + fixtures.Block("CERTIFICATE", caA.Cert.Raw, map[string]string{"X": "y"}) + "mid\n" + fixtures.Bundle(caB), wantCount: 2},
		{name: "leaf certificates are kept: merging does not judge trust", data: fixtures.Bundle(leaf), wantCount: 1},
		{name: "duplicates are kept: the pool dedupes", data: fixtures.Bundle(caA, caA), wantCount: 2},
		{name: "no certificate is not an error here", data: "nothing", wantCount: 0},
		{
			name:    "a private key refuses the whole source",
			data:    fixtures.Bundle(caA) + keyPB,
			wantErr: `PEM block 1 has type "PRIVATE KEY"; only CERTIFICATE blocks are allowed in trust sources, so the whole source was refused`,
		},
		{name: "a certificate that is not X.509 refuses the whole source", data: fixtures.Bundle(caA) + fixtures.Block("CERTIFICATE", []byte("junk"), nil), wantErr: "PEM block 1 does not parse as X.509"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ders, err := DecodeCertificates([]byte(tc.data))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to say %q", err, tc.wantErr)
				}
				var pemErr *InvalidPEMError
				if !errors.As(err, &pemErr) || !IsInvalidPEM(err) {
					t.Fatalf("err is %T, want *InvalidPEMError", err)
				}
				if ders != nil {
					t.Fatalf("returned %d certificates alongside the error", len(ders))
				}
				return
			}
			if err != nil || len(ders) != tc.wantCount {
				t.Fatalf("got %d certificates, err %v; want %d", len(ders), err, tc.wantCount)
			}
		})
	}
}
