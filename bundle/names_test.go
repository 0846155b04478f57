package bundle

import (
	"slices"
	"strings"
	"testing"
)

func TestNameValidator(t *testing.T) {
	tests := []struct {
		name   string
		form   Form
		signer string
		object string
		want   []string
	}{
		{name: "native: an unsigned bundle may have any DNS subdomain name", form: NativeForm, object: "corp-root"},
		{name: "native: an unsigned bundle may not have a colon", form: NativeForm, object: "corp:root", want: []string{`ClusterTrustBundle without signer name must not have ":" in its name`}},
		{name: "native: an unsigned bundle name must be a DNS subdomain", form: NativeForm, object: "Corp_Root", want: []string{"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"}},
		{name: "native: a signed bundle carries the signer prefix with colons", form: NativeForm, signer: "example.com/mysigner", object: "example.com:mysigner:live"},
		{name: "native: a nested signer path keeps its dots", form: NativeForm, signer: "example.com/a.b", object: "example.com:a.b:v1"},
		{name: "native: a signed bundle without the prefix is refused", form: NativeForm, signer: "example.com/mysigner", object: "live", want: []string{"ClusterTrustBundle for signerName example.com/mysigner must be named with prefix example.com:mysigner:"}},
		{name: "native: another signer's prefix is refused", form: NativeForm, signer: "example.com/mysigner", object: "example.com:other:live", want: []string{"ClusterTrustBundle for signerName example.com/mysigner must be named with prefix example.com:mysigner:"}},
		{name: "native: the suffix may not be empty", form: NativeForm, signer: "example.com/s", object: "example.com:s:", want: []string{"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"}},
		{name: "native: the suffix may not hold another colon", form: NativeForm, signer: "example.com/s", object: "example.com:s:a:b", want: []string{"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"}},
		{name: "native: dashes are ordinary in native names", form: NativeForm, signer: "example.com/s", object: "example.com:s:a--b"},

		{name: "mirror: an unsigned bundle may have any DNS subdomain name without a double dash", form: MirrorForm, object: "corp-root"},
		{name: "mirror: an unsigned bundle may not have a double dash", form: MirrorForm, object: "corp--root", want: []string{`ClusterTrustBundle without signer name must not have "--" in its name`}},
		{name: "mirror: a signed bundle carries the signer prefix with double dashes", form: MirrorForm, signer: "example.com/server-tls", object: "example.com--server-tls--live"},
		{name: "mirror: signer labels with double dashes are fine in the prefix", form: MirrorForm, signer: "xn--bcher-kva.example/s", object: "xn--bcher-kva.example--s--live"},
		{name: "mirror: the colon form is refused", form: MirrorForm, signer: "example.com/server-tls", object: "example.com:server-tls:live", want: []string{"ClusterTrustBundle for signerName example.com/server-tls must be named with prefix example.com--server-tls--"}},
		{name: "mirror: the suffix may not hold a double dash", form: MirrorForm, signer: "example.com/s", object: "example.com--s--a--b", want: []string{`ClusterTrustBundle for signerName example.com/s must not have "--" in its name after the prefix example.com--s--`}},
		{name: "mirror: a name another signer could claim is refused to the squatter", form: MirrorForm, signer: "a.com--b/c", object: "a.com--b--c--live",
			want: []string{`mirror name a.com--b--c--live also begins with a.com--b--c--, the mirror prefix of signer a.com/b--c, whose attesters could then take it: mirror names must belong to one signer only; use, for the mirror, a signer name that no other reading of "--" as "/" turns into another valid signer (no "--" in its path, nor in a domain label but the first), or the native API`}},
		{name: "mirror: and to the signer it was aimed at, so no name is ever claimable twice", form: MirrorForm, signer: "a.com/b--c", object: "a.com--b--c--live",
			want: []string{`mirror name a.com--b--c--live also begins with a.com--b--c--, the mirror prefix of signer a.com--b/c, whose attesters could then take it: mirror names must belong to one signer only; use, for the mirror, a signer name that no other reading of "--" as "/" turns into another valid signer (no "--" in its path, nor in a domain label but the first), or the native API`}},
		{name: "mirror: an IDN label after the first is as ambiguous", form: MirrorForm, signer: "example.com/xn--bcher-kva", object: "example.com--xn--bcher-kva--live",
			want: []string{`mirror name example.com--xn--bcher-kva--live also begins with example.com--xn--bcher-kva--, the mirror prefix of signer example.com--xn/bcher-kva, whose attesters could then take it: mirror names must belong to one signer only; use, for the mirror, a signer name that no other reading of "--" as "/" turns into another valid signer (no "--" in its path, nor in a domain label but the first), or the native API`}},
		{name: "mirror: the suffix may not be empty", form: MirrorForm, signer: "example.com/s", object: "example.com--s--", want: []string{"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := NameValidator(tc.signer, tc.form)(tc.object, false)
			if !slices.Equal(got, tc.want) {
				t.Errorf("NameValidator(%q, %v)(%q) =\n  %q\nwant\n  %q", tc.signer, tc.form, tc.object, got, tc.want)
			}
		})
	}
}

func TestValidateSignerName(t *testing.T) {
	const path = "spec.signerName"
	long := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		name   string
		signer string
		want   []string
	}{
		{name: "a domain and a path is valid", signer: "example.com/server-tls"},
		{name: "a dotted path is valid", signer: "example.com/server-tls.v2"},
		{name: "the reserved kubernetes.io domain is accepted: attest guards it", signer: "kubernetes.io/kube-apiserver-client"},
		{name: "empty is required", signer: "", want: []string{path + ": Required value"}},
		{name: "no slash is not a domain and path", signer: "example.com", want: []string{path + `: Invalid value: "example.com": must be a fully qualified domain and path of the form 'example.com/signer-name'`}},
		{name: "two slashes is not a domain and path", signer: "example.com/a/b", want: []string{path + `: Invalid value: "example.com/a/b": must be a fully qualified domain and path of the form 'example.com/signer-name'`}},
		{name: "a single-label domain needs a second segment", signer: "localhost/s", want: []string{path + `: Invalid value: "localhost": should be a domain with at least two segments separated by dots`}},
		{
			name:   "a bad domain label is reported once, naming the label",
			signer: "Example.COM/s",
			want:   []string{path + `: Invalid value: "Example.COM": validating label "Example": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`},
		},
		{
			name:   "an empty path is reported as a bad label",
			signer: "example.com/",
			want:   []string{path + `: Invalid value: "": validating label "": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		},
		{
			name:   "a domain label over 63 characters is refused",
			signer: long(64) + ".com/s",
			want:   []string{path + `: Invalid value: "` + long(64) + `.com": validating label "` + long(64) + `": must be no more than 63 characters`},
		},
		{
			name:   "a domain over 253 characters is too long",
			signer: strings.Repeat(long(63)+".", 4) + "com/s",
			want:   []string{path + ": Too long: may not be more than 253 bytes"},
		},
		{
			name:   "a signer name over 571 characters is too long",
			signer: "example.com/" + strings.Repeat(long(60)+".", 9) + long(60),
			want:   []string{path + ": Too long: may not be more than 571 bytes"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := messages(ValidateSignerName(signerNamePath, tc.signer))
			if !slices.Equal(got, tc.want) {
				t.Errorf("ValidateSignerName(%q) =\n  %q\nwant\n  %q", tc.signer, got, tc.want)
			}
		})
	}
}

func TestMirrorNames(t *testing.T) {
	tests := []struct {
		upstream, signer, mirror string
	}{
		{"example.com:server-tls:live", "example.com/server-tls", "example.com--server-tls--live"},
		{"corp-root", "", "corp-root"},
		// A signer with "--" of its own maps back only through its signerName.
		{"xn--bcher-kva.example:s:v1", "xn--bcher-kva.example/s", "xn--bcher-kva.example--s--v1"},
		{"example.com:a.b:v1", "example.com/a.b", "example.com--a.b--v1"},
	}
	for _, tc := range tests {
		t.Run(tc.upstream, func(t *testing.T) {
			if got := MirrorName(tc.upstream); got != tc.mirror {
				t.Errorf("MirrorName(%q) = %q, want %q", tc.upstream, got, tc.mirror)
			}
			if got := UpstreamName(tc.mirror, tc.signer); got != tc.upstream {
				t.Errorf("UpstreamName(%q, %q) = %q, want %q", tc.mirror, tc.signer, got, tc.upstream)
			}
		})
	}
	t.Run("a mirror name without its signer's prefix is returned unchanged", func(t *testing.T) {
		if got := UpstreamName("stray--name", "example.com/s"); got != "stray--name" {
			t.Errorf("UpstreamName = %q", got)
		}
	})
}
