package targets

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/trustsync/trustsync/sidecar/contract"
)

func bundleFrom(t *testing.T, doc string) *TrustManagerBundle {
	t.Helper()
	var b TrustManagerBundle
	if err := yaml.UnmarshalStrict([]byte(doc), &b); err != nil {
		t.Fatal(err)
	}
	return &b
}

func TestFromTrustManager_WritesTheSameKeysFromTheSameSourcesAndSaysWhatItCannot(t *testing.T) {
	for _, tc := range []struct {
		name        string
		doc         string
		wantSources []contract.Source
		wantObject  string
		wantBundles int
		wantNotes   []string
	}{
		{
			name: "public roots and an inline CA into a ConfigMap key, with both truststores, in labelled namespaces",
			doc: `apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: example.org}
spec:
  sources:
  - useDefaultCAs: true
  - inLine: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
  target:
    configMap: {key: root-certs.pem}
    additionalFormats:
      jks: {key: bundle.jks}
      pkcs12: {key: bundle.p12, password: changeit}
    namespaceSelector:
      matchLabels: {linkerd.io/inject: enabled}`,
			wantSources: []contract.Source{
				{DefaultCAs: true, Path: "bundle.jks", Format: "jks"}, {Name: "example.org-inline-1", Path: "bundle.jks", Format: "jks"},
				{DefaultCAs: true, Path: "root-certs.pem"}, {Name: "example.org-inline-1", Path: "root-certs.pem"},
				{DefaultCAs: true, Path: "bundle.p12", Format: "pkcs12"}, {Name: "example.org-inline-1", Path: "bundle.p12", Format: "pkcs12"},
			},
			wantObject: "configMap example.org", wantBundles: 1,
		},
		{
			name: "a Secret source in the trust namespace is not carried over, and said so; a PKCS#12 store without a password is",
			doc: `apiVersion: trust-manager.io/v1alpha2
kind: ClusterBundle
metadata: {name: corp}
spec:
  sources:
  - secret: {name: ca-key-pair, key: tls.crt}
  - useDefaultCAs: true
  target:
    secret: {key: ca.crt}
    additionalFormats:
      pkcs12: {key: ca.p12}`,
			wantSources: []contract.Source{{DefaultCAs: true, Path: "ca.crt"}, {DefaultCAs: true, Path: "ca.p12", Format: "pkcs12"}},
			wantObject:  "secret corp",
			wantNotes: []string{`secret "ca-key-pair" key "tls.crt" in trust-manager's trust namespace, is not carried over`,
				`its pkcs12 store at key "ca.p12" had password ""`, "trustsync writes Secrets only where the chart allows it"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := FromTrustManager(bundleFrom(t, tc.doc))
			got := c.Target.Spec.Sources
			if len(got) != len(tc.wantSources) {
				t.Fatalf("sources %+v, want %+v", got, tc.wantSources)
			}
			for i := range got {
				g, w := got[i], tc.wantSources[i]
				if g.Name != w.Name || g.DefaultCAs != w.DefaultCAs || g.Path != w.Path || g.Format != w.Format {
					t.Errorf("source %d: %+v, want %+v", i, g, w)
				}
			}
			object := "configMap " + c.Target.Name
			if c.Target.Spec.Target.Secret != nil {
				object = "secret " + c.Target.Spec.Target.Secret.Name
			}
			if object != tc.wantObject {
				t.Errorf("writes %s, want %s", object, tc.wantObject)
			}
			if len(c.Bundles) != tc.wantBundles {
				t.Errorf("%d bundles, want %d", len(c.Bundles), tc.wantBundles)
			}
			if len(c.Notes) != len(tc.wantNotes) {
				t.Errorf("notes %q, want %d", c.Notes, len(tc.wantNotes))
			}
			for _, want := range tc.wantNotes {
				if !strings.Contains(strings.Join(c.Notes, "\n"), want) {
					t.Errorf("no note says %q; notes: %q", want, c.Notes)
				}
			}
			if errs := c.Target.Spec.Validate(); len(errs) > 0 {
				t.Errorf("the TrustTarget it makes is refused: %v", errs.ToAggregate())
			}
		})
	}
}
