package signer

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestMoved_TheTargetsFlagsSayWhereTheyWent(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // "" for accepted
	}{
		{name: "the signer's own flags", args: []string{"--ca-propagation=timed"}},
		{name: "a bare --targets", args: []string{"--targets"}, want: "--targets moved to trustsync-controller"},
		{name: "--targets=false too", args: []string{"--targets=false"}, want: "--targets moved to trustsync-controller"},
		{name: "the rate flags", args: []string{"--targets-kube-api-qps=50"}, want: "its API rate flags are --kube-api-qps and --kube-api-burst"},
		{name: "Secrets", args: []string{"--targets-secrets"}, want: "--targets-secrets moved to trustsync-controller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("trustsync-signer", pflag.ContinueOnError)
			NewOptions().AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatalf("parse: %v", err)
			}
			err := Moved(fs)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v; want an error containing %q", err, tc.want)
			}
		})
	}
	fs := pflag.NewFlagSet("trustsync-signer", pflag.ContinueOnError)
	NewOptions().AddFlags(fs)
	if usage := fs.FlagUsages(); strings.Contains(usage, "--targets") {
		t.Errorf("--help still lists the moved flags:\n%s", usage)
	}
}

// The bundle endpoint's refresh hint must leave peers time within the rotation's
// longest wait; without the endpoint it does not matter.
func TestOptions_RefreshHintFitsTheRotationsWait(t *testing.T) {
	for _, tc := range []struct {
		name     string
		address  string
		hint     time.Duration
		maxWait  time.Duration
		wantFail bool
	}{
		{"default hint, default wait", ":8443", time.Minute, time.Hour, false},
		{"three hints beyond the wait", ":8443", 30 * time.Minute, time.Hour, true},
		{"a hint under a second", ":8443", 100 * time.Millisecond, time.Hour, true},
		{"no endpoint: the hint is not used", "", 30 * time.Minute, time.Hour, false},
	} {
		o := NewOptions()
		o.Namespace, o.BundleEndpointAddress, o.BundleEndpointRefreshHint, o.CAPropagationMaxWait = "ns", tc.address, tc.hint, tc.maxWait
		if err := o.Validate(); (err != nil) != tc.wantFail {
			t.Errorf("%s: Validate() = %v", tc.name, err)
		}
	}
}
