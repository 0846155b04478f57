package keyuri

import (
	"strings"
	"testing"
)

func TestParse_AcceptsWhatNamesAKeeperAKeyAndHowToReachIt(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Ref
		key      string
	}{
		{
			name: "pkcs11 by object label",
			in:   "pkcs11:token=trustsync;object=ca-workload?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-source=/var/run/pin/pin",
			want: Ref{Keeper: KeeperPKCS11, Token: "trustsync", Object: "ca-workload", ModulePath: "/usr/lib/softhsm/libsofthsm2.so", PINSource: "/var/run/pin/pin"},
			key:  "pkcs11:token=trustsync;object=ca-workload",
		},
		{
			name: "pkcs11 by id, percent-encoded bytes",
			in:   "pkcs11:token=my%20hsm;id=%01%a2?module-path=/m.so&pin-source=/p",
			want: Ref{Keeper: KeeperPKCS11, Token: "my hsm", ID: []byte{0x01, 0xa2}, ModulePath: "/m.so", PINSource: "/p"},
			key:  "pkcs11:token=my%20hsm;id=%01%a2",
		},
		{
			name: "awskms by alias with a local endpoint",
			in:   "awskms:key-id=alias/trustsync-ca;region=eu-west-1;endpoint=http://127.0.0.1:4599",
			want: Ref{Keeper: KeeperAWSKMS, KeyID: "alias/trustsync-ca", Region: "eu-west-1", Endpoint: "http://127.0.0.1:4599"},
			key:  "awskms:key-id=alias/trustsync-ca",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got.Keeper != tc.want.Keeper || got.Token != tc.want.Token || got.Object != tc.want.Object || string(got.ID) != string(tc.want.ID) ||
				got.ModulePath != tc.want.ModulePath || got.PINSource != tc.want.PINSource || got.KeyID != tc.want.KeyID || got.Region != tc.want.Region || got.Endpoint != tc.want.Endpoint {
				t.Fatalf("Parse(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
			if got.Key() != tc.key {
				t.Errorf("Key() = %q, want %q", got.Key(), tc.key)
			}
			again, err := Parse(got.String())
			if err != nil || again.String() != got.String() {
				t.Errorf("String() %q does not parse back to itself: %v", got.String(), err)
			}
		})
	}
}

func TestParse_RefusesWhatWouldLeakAPINOrNameTheWrongKey(t *testing.T) {
	for _, tc := range []struct {
		name, in, says string
	}{
		{"a PIN in the URI", "pkcs11:token=t;object=o?module-path=/m.so&pin-value=1234", "carries a PIN"},
		{"a PIN in the path", "pkcs11:token=t;object=o;pin-value=1234?module-path=/m.so&pin-source=/p", "carries a PIN"},
		{"no token", "pkcs11:object=o?module-path=/m.so&pin-source=/p", "add token=LABEL"},
		{"no key", "pkcs11:token=t?module-path=/m.so&pin-source=/p", "add object=LABEL"},
		{"no module", "pkcs11:token=t;object=o?pin-source=/p", "module-path="},
		{"no PIN file", "pkcs11:token=t;object=o?module-path=/m.so", "pin-source="},
		{"a typo in an attribute", "pkcs11:tokne=t;object=o?module-path=/m.so&pin-source=/p", `attribute "tokne"`},
		{"an attribute twice", "pkcs11:token=t;token=u;object=o?module-path=/m.so&pin-source=/p", "token twice"},
		{"bad percent-encoding", "pkcs11:token=t%zz;object=o?module-path=/m.so&pin-source=/p", "percent-encoded"},
		{"no scheme", "/etc/ca.key", "names no keeper"},
		{"an unknown keeper", "gcpkms:projects/p", `keeper "gcpkms"`},
		{"awskms without key", "awskms:region=us-east-1", "names no key"},
		{"awskms without region", "awskms:key-id=alias/ca", "names no region"},
		{"awskms alias with a space", "awskms:key-id=alias/my%20ca;region=us-east-1", "not an alias"},
		{"awskms endpoint not a URL", "awskms:key-id=alias/ca;region=r;endpoint=localhost", "not an http(s) URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Parse(%q) = %v, want an error saying %q", tc.in, err, tc.says)
			}
			if strings.Contains(err.Error(), "1234") {
				t.Errorf("the error repeats the PIN: %v", err)
			}
		})
	}
}

func TestWithKey_ReadsARecordedKeyOnlyInTheKeeperTheKeyRefNames(t *testing.T) {
	ref, err := Parse("pkcs11:token=trustsync;object=ca?module-path=/m.so&pin-source=/p")
	if err != nil {
		t.Fatal(err)
	}
	next, err := ref.WithKey("pkcs11:token=trustsync;id=%02;object=ca-2")
	if err != nil {
		t.Fatal(err)
	}
	if next.Object != "ca-2" || string(next.ID) != "\x02" || next.ModulePath != "/m.so" || next.PINSource != "/p" {
		t.Errorf("WithKey kept %+v, want object ca-2, id 02 and the keyRef's module and PIN file", next)
	}
	for _, tc := range []struct{ key, says string }{
		{"pkcs11:token=other;object=ca", `not in token "trustsync"`},
		{"awskms:key-id=alias/ca", "another keeper"},
		{"pkcs11:token=trustsync", "no object or id"},
	} {
		if _, err := ref.WithKey(tc.key); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("WithKey(%q) = %v, want an error saying %q", tc.key, err, tc.says)
		}
	}
}
