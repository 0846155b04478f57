package plugin

import "testing"

func TestSafe_NothingATenantWroteControlsTheTerminal(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{name: "a plain name is as it is", in: "web-7d9f/ca.pem", want: "web-7d9f/ca.pem"},
		{name: "unicode letters stay", in: "café", want: "café"},
		{name: "an escape sequence is spelt out", in: "a\x1b]0;owned\x07b", want: `a\x1b]0;owned\ab`},
		{name: "a newline cannot start a new row", in: "a\nb", want: `a\nb`},
		{name: "a tab cannot shift the columns", in: "a\tb", want: `a\tb`},
		{name: "a backslash is doubled, so an escape is never ambiguous", in: `a\x1b`, want: `a\\x1b`},
		{name: "a zero-width character is shown", in: "a\u200bb", want: `a\u200bb`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := safe(tc.in); got != tc.want {
				t.Fatalf("safe(%q) = %q; want %q", tc.in, got, tc.want)
			}
		})
	}
}
