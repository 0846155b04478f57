package controller

import (
	"strings"
	"testing"
)

func TestValidate_SecretNamesNarrowSecretsAndAreSecretNames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		secrets bool
		names   []string
		says    string
	}{
		{"every Secret", true, nil, ""},
		{"names with Secrets allowed", true, []string{"trust-roots", "ca.bundle"}, ""},
		{"names without Secrets allowed", false, []string{"trust-roots"}, "--targets-secret-names trust-roots narrows the Secrets --targets-secrets allows: give --targets-secrets too"},
		{"a name no Secret can have", true, []string{"Trust_Roots"}, `--targets-secret-names: "Trust_Roots" is not a Secret's name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			o.Namespace, o.Secrets, o.SecretNames = "trustsync-system", tc.secrets, tc.names
			err := o.Validate()
			switch {
			case tc.says == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
				t.Errorf("got %v, want it refused saying %q", err, tc.says)
			}
		})
	}
}
