package clientflags

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestFlags_ParseOverTheBinarysDefaultsAndRefuseARateNoClientShouldRunWith(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		want    Flags
		wantErr string
	}{
		{name: "no flag keeps the binary's defaults", want: Flags{QPS: 20, Burst: 30}},
		{name: "each flag sets its field", args: []string{"--kubeconfig=/etc/kube.conf", "--kube-api-qps=50", "--kube-api-burst=75"}, want: Flags{Kubeconfig: "/etc/kube.conf", QPS: 50, Burst: 75}},
		{name: "a QPS of 0 (client-go's default of 5) is refused", args: []string{"--kube-api-qps=0"}, wantErr: "--kube-api-qps (0) and --kube-api-burst (30) must be positive"},
		{name: "a negative QPS (no limit at all) is refused", args: []string{"--kube-api-qps=-1"}, wantErr: "--kube-api-qps (-1) and --kube-api-burst (30) must be positive"},
		{name: "a burst below 1 is refused", args: []string{"--kube-api-burst=0"}, wantErr: "--kube-api-qps (20) and --kube-api-burst (0) must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Flags{QPS: 20, Burst: 30}
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			f.AddFlags(fs, "the test's ServiceAccount", "")
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := f.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate() = %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || f != tc.want {
				t.Errorf("parsed %+v, %v; want %+v", f, err, tc.want)
			}
		})
	}
}

func TestAddFlags_TheHelpSaysWhoseIdentityAndWhatTheRateLimits(t *testing.T) {
	f := Flags{QPS: 5, Burst: 10}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f.AddFlags(fs, "the agent's ServiceAccount", "a bundle edit is one write per object")
	if got := fs.Lookup(FlagKubeconfig).Usage; !strings.Contains(got, "(the agent's ServiceAccount)") {
		t.Errorf("--kubeconfig says %q", got)
	}
	if got := fs.Lookup(FlagQPS).Usage; got != "Queries per second to the API server: a bundle edit is one write per object" {
		t.Errorf("--kube-api-qps says %q", got)
	}
}
