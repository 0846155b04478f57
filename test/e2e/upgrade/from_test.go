package upgrade

import (
	"strings"
	"testing"
)

// make test-upgrade FROM=<short commit>, the Makefile's own usage, names the commit in
// full; what git does not know is refused, saying so.
func TestResolveCommit_AShortCommitIsTheFullOne(t *testing.T) {
	full, err := resolveCommit("HEAD")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want, err string }{
		{in: full[:7], want: full},
		{in: full, want: full},
		{in: "not-a-commit", err: "FROM=not-a-commit (TRUSTSYNC_UPGRADE_FROM) is not a commit of this repository"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := resolveCommit(tc.in)
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v; want one saying %q", err, tc.err)
			case tc.err == "" && (err != nil || got != tc.want):
				t.Errorf("%q, %v; want %s", got, err, tc.want)
			}
		})
	}
}
