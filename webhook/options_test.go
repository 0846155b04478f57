package webhook

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestOptions_RefuseWhatWouldBreakInjectedPods: flags whose values would only fail
// later, in every pod the webhook injects, are refused at start with the flag named.
func TestOptions_RefuseWhatWouldBreakInjectedPods(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "defaults with self-managed TLS are accepted", args: nil},
		{name: "pull secrets by name are accepted", args: []string{"--sidecar-image-pull-secrets=registry-a,registry-b"}},
		{name: "a pull secret that is no Secret name is refused", args: []string{"--sidecar-image-pull-secrets=Registry_A"},
			wantErr: `--sidecar-image-pull-secrets: "Registry_A" is not a Secret name`},
		{name: "an unknown pull policy is refused", args: []string{"--sidecar-image-pull-policy=Sometimes"},
			wantErr: `--sidecar-image-pull-policy "Sometimes" is not one of`},
		{name: "an unknown sidecar mode is refused", args: []string{"--default-sidecar-mode=sidecar"},
			wantErr: `--default-sidecar-mode "sidecar" is not one of`},
		{name: "the sidecar Event bindings are refused, naming where they moved", args: []string{"--sidecar-events-cluster-role=trustsync-sidecar-events"},
			wantErr: "--sidecar-events-cluster-role moved to trustsync-controller"},
		{name: "a rate limit no client should run with is refused", args: []string{"--kube-api-qps=0"},
			wantErr: "--kube-api-qps (0) and --kube-api-burst (30) must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("webhook", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(append([]string{"--self-managed-tls", "--namespace=trustsync"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
