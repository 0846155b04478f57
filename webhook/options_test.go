package webhook

import (
	"testing"

	"github.com/spf13/pflag"
)

func TestHealthBindAddress_OneFlagAsEveryBinaryWithTheOldPortStillTaken(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "the default", want: ":8081"},
		{name: "an address", args: []string{"--health-bind-address=127.0.0.1:9000"}, want: "127.0.0.1:9000"},
		{name: "empty serves none", args: []string{"--health-bind-address="}, want: ""},
		{name: "the deprecated port, on the bind address", args: []string{"--bind-address=10.0.0.1", "--health-port=9001"}, want: "10.0.0.1:9001"},
		{name: "the deprecated port 0 serves none", args: []string{"--health-port=0"}, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("trustsync-webhook", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if got := o.HealthBindAddress(); got != tc.want {
				t.Errorf("HealthBindAddress() = %q; want %q", got, tc.want)
			}
		})
	}
}
