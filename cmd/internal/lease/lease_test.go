package lease

import (
	"strings"
	"testing"
	"time"
)

func TestFlags_Campaign(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*Flags)
		wantNil bool
		wantErr string
	}{
		{name: "the defaults stand for the Lease", mutate: func(*Flags) {}},
		{name: "election off means no campaign: every replica acts", mutate: func(f *Flags) { f.Enabled = false }, wantNil: true},
		{name: "a lease no longer than the renew deadline is refused, naming both flags",
			mutate:  func(f *Flags) { f.LeaseDuration = 10 * time.Second },
			wantErr: "--leader-elect-lease-duration (10s) must be longer than --leader-elect-renew-deadline (10s)"},
		{name: "a renew deadline inside the jittered retry period is refused",
			mutate:  func(f *Flags) { f.RenewDeadline, f.RetryPeriod = 3*time.Second, 5*time.Second },
			wantErr: "--leader-elect-renew-deadline (3s) must be longer than 1.2 times --leader-elect-retry-period (5s)"},
		{name: "a retry period under a millisecond is refused",
			mutate:  func(f *Flags) { f.RetryPeriod = time.Microsecond },
			wantErr: "--leader-elect-retry-period (1µs) must be at least 1ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFlags()
			tc.mutate(f)
			c, err := f.Campaign()
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case tc.wantNil != (c == nil):
				t.Fatalf("campaign nil = %v, want %v", c == nil, tc.wantNil)
			}
		})
	}
}
