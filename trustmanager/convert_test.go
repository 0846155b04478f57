package trustmanager

import (
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/test/fixtures"
)

func bundleFrom(t *testing.T, doc string) *TrustManagerBundle {
	t.Helper()
	var b TrustManagerBundle
	if err := yaml.Unmarshal([]byte(doc), &b); err != nil {
		t.Fatal(err)
	}
	return &b
}

// describe is each target as "<kind> <object> <- path:format,...".
func describe(c Conversion) []string {
	var out []string
	for _, t := range c.Targets {
		kind, obj := "configMap", t.Spec.Target.ConfigMap
		if t.Spec.Target.Secret != nil {
			kind, obj = "secret", t.Spec.Target.Secret
		}
		var srcs []string
		for _, s := range t.Spec.Sources {
			from := s.Name
			if s.DefaultCAs {
				from = "defaultCAs"
			}
			format := s.FileFormat()
			if s.PKCS12Profile != "" {
				format += "/" + s.PKCS12Profile
			}
			srcs = append(srcs, from+">"+s.Path+":"+format)
		}
		out = append(out, t.Name+": "+kind+" "+obj.Name+" <- "+strings.Join(srcs, ","))
	}
	return out
}

func TestFromTrustManager_WritesTheSameKeysFromTheSameSourcesAndSaysWhatItCannot(t *testing.T) {
	twelve := ""
	for range 12 {
		twelve += "\n  - useDefaultCAs: true"
	}
	ca := fixtures.CA("inline")
	inline := strconv.Quote(string(ca.CertPEM()))
	twice := strconv.Quote(string(ca.CertPEM()) + string(ca.CertPEM()))
	leaf := strconv.Quote(string(fixtures.MustNew(fixtures.Options{Leaf: true}).CertPEM()))
	for _, tc := range []struct {
		name        string
		doc         string
		wantTargets []string
		wantBundles int
		wantNotes   []string
		wantRefused string
	}{
		{
			name: "a Bundle: public roots and an inline CA into a ConfigMap key, with both truststores, in labelled namespaces",
			doc: `apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: example.org}
spec:
  sources:
  - useDefaultCAs: true
  - inLine: ` + inline + `
  target:
    configMap: {key: root-certs.pem}
    additionalFormats:
      jks: {key: bundle.jks}
      pkcs12: {key: bundle.p12, password: changeit}
    namespaceSelector:
      matchLabels: {linkerd.io/inject: enabled}`,
			wantTargets: []string{"example.org: configMap example.org <- defaultCAs>bundle.jks:jks,example.org-inline-1>bundle.jks:jks,defaultCAs>root-certs.pem:pem,example.org-inline-1>root-certs.pem:pem,defaultCAs>bundle.p12:pkcs12,example.org-inline-1>bundle.p12:pkcs12"},
			wantBundles: 1,
		},
		{
			name: "a Bundle writing both a ConfigMap and a Secret becomes two targets, the Secret's said so",
			doc: `apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: corp}
spec:
  sources:
  - useDefaultCAs: true
  target:
    configMap: {key: ca.crt}
    secret: {key: ca.crt}`,
			wantTargets: []string{"corp: configMap corp <- defaultCAs>ca.crt:pem", "corp-secret: secret corp <- defaultCAs>ca.crt:pem"},
			wantNotes:   []string{"trustsync writes Secrets only where the chart allows it"},
		},
		{
			name: "a source that is not carried over (a Secret in trust-manager's namespace) leaves every target refused, never ready to apply with fewer anchors",
			doc: `apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: corp}
spec:
  sources:
  - secret: {name: ca-key-pair, key: tls.crt}
  - useDefaultCAs: true
  target:
    configMap: {key: ca.crt}
    secret: {key: ca.crt}`,
			wantNotes:   []string{`secret "ca-key-pair" key "tls.crt" in trust-manager's trust namespace, is not carried over`},
			wantRefused: `TrustTarget "corp" would be refused: source 0 not carried over (above), and without it the target would write fewer anchors than trust-manager did`,
		},
		{
			name: "sources times keys over the controller's limit are refused, not printed as ready",
			doc: `apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: many}
spec:
  sources:` + twelve + `
  target:
    configMap: {key: a.pem}
    additionalFormats:
      jks: {key: a.jks}
      pkcs12: {key: a.p12, password: changeit}`,
			wantRefused: `TrustTarget "many" would be refused: spec.sources: Too many: 36: must have at most 32 items`,
		},
		{
			name: "a ClusterBundle as trust-manager's CRD has it: defaultCAs, inLineCAs, sourceRefs, data keys with formats and metadata",
			doc: `apiVersion: trust-manager.io/v1alpha2
kind: ClusterBundle
metadata: {name: corp-roots}
spec:
  defaultCAs: {provider: System}
  inLineCAs: ` + inline + `
  target:
    configMap:
      data:
      - {key: ca.pem}
      - {key: ca.p12, format: PKCS12, password: changeit, profile: Modern2023}
      metadata:
        labels: {team: platform}
    namespaceSelector:
      matchLabels: {trust: corp}`,
			wantTargets: []string{"corp-roots: configMap corp-roots <- defaultCAs>ca.pem:pem,corp-roots-inline-1>ca.pem:pem,defaultCAs>ca.p12:pkcs12/Modern2023,corp-roots-inline-1>ca.p12:pkcs12/Modern2023"},
			wantBundles: 1,
			wantNotes:   []string{"target.configMap.metadata (labels and annotations for the written objects) is not carried over"},
		},
		{
			name: "a ClusterBundle's sourceRefs are not carried over, and its target is refused for it",
			doc: `apiVersion: trust-manager.io/v1alpha2
kind: ClusterBundle
metadata: {name: corp-roots}
spec:
  defaultCAs: {provider: System}
  sourceRefs:
  - {kind: ConfigMap, name: corp-ca, key: "*.crt"}
  target:
    configMap:
      data:
      - {key: ca.pem}`,
			wantNotes:   []string{`sourceRefs[0], a ConfigMap "corp-ca" key "*.crt" in trust-manager's trust namespace`},
			wantRefused: `TrustTarget "corp-roots" would be refused: sourceRefs[0] not carried over`,
		},
		{
			name: "a ClusterBundle's password-less PKCS#12 (its default) is said to get trustsync's password",
			doc: `apiVersion: trust-manager.io/v1alpha2
kind: ClusterBundle
metadata: {name: p12}
spec:
  defaultCAs: {provider: System}
  target:
    secret:
      data: [{key: ca.p12, format: PKCS12}]`,
			wantTargets: []string{"p12: secret p12 <- defaultCAs>ca.p12:pkcs12"},
			wantNotes:   []string{`its pkcs12 store at key "ca.p12" had password ""`, "trustsync writes Secrets only where the chart allows it"},
		},
		{
			name: "a Bundle's target metadata is named, not dropped, and its PKCS#12 profile carried",
			doc: `apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: meta}
spec:
  sources: [{useDefaultCAs: true}]
  target:
    configMap: {key: ca.crt, metadata: {labels: {app: billing}}}
    additionalFormats: {pkcs12: {key: ca.p12, password: changeit, profile: Modern2023}}`,
			wantTargets: []string{"meta: configMap meta <- defaultCAs>ca.crt:pem,defaultCAs>ca.p12:pkcs12/Modern2023"},
			wantNotes:   []string{`target.configMap.metadata (labels and annotations for the written objects) is not carried over: a TrustTarget labels its objects trustsync.io/target alone, so readers selecting by labels ["app"]`},
		},
		{
			name: "a legacy PKCS#12 profile is named and written as Modern2023",
			doc: `apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: legacy}
spec:
  sources: [{useDefaultCAs: true}]
  target:
    configMap: {key: ca.crt}
    additionalFormats: {pkcs12: {key: ca.p12, password: changeit, profile: LegacyRC2}}`,
			wantTargets: []string{"legacy: configMap legacy <- defaultCAs>ca.crt:pem,defaultCAs>ca.p12:pkcs12"},
			wantNotes:   []string{`additionalFormats.pkcs12 key "ca.p12" asks for the PKCS#12 profile "LegacyRC2"; trustsync writes no legacy profile, and writes it as Modern2023`},
		},
		{
			name: "an inline anchor given twice is refused as the API server would, and the target reading it with it",
			doc: `apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: twice}
spec:
  sources: [{inLine: ` + twice + `}]
  target: {configMap: {key: ca.crt}}`,
			wantRefused: "ClusterTrustBundle twice-inline-1 (from the inline CAs) would be refused by the API server: spec.trustBundle: Invalid value: \"<value omitted>\": duplicate trust anchor (indices [0 1])",
		},
		{
			name: "an inline leaf certificate is refused as the API server would",
			doc: `apiVersion: trust-manager.io/v1alpha2
kind: ClusterBundle
metadata: {name: leafy}
spec:
  inLineCAs: ` + leaf + `
  target: {configMap: {data: [{key: ca.crt}]}}`,
			wantRefused: "would be refused by the API server: spec.trustBundle: Invalid value: \"<value omitted>\": entry 0",
		},
		{
			name: "a name that cannot be an object's is refused, and every note stays one line",
			doc: `apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: "x\n---\napiVersion: rbac.authorization.k8s.io/v1"}
spec:
  sources: [{useDefaultCAs: true}, {configMap: {name: "a\nkind: ClusterRoleBinding", key: k}}]
  target: {configMap: {key: ca.crt}}`,
			wantNotes:   []string{`configMap "a\nkind: ClusterRoleBinding" key "k"`},
			wantRefused: `TrustTarget "x\n---\napiVersion: rbac.authorization.k8s.io/v1" would be refused: metadata.name`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := FromTrustManager(bundleFrom(t, tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(c); strings.Join(got, "\n") != strings.Join(tc.wantTargets, "\n") {
				t.Errorf("targets:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.wantTargets, "\n"))
			}
			if len(c.Bundles) != tc.wantBundles {
				t.Errorf("%d bundles, want %d", len(c.Bundles), tc.wantBundles)
			}
			notes := strings.Join(c.Notes, "\n")
			for _, want := range tc.wantNotes {
				if !strings.Contains(notes, want) {
					t.Errorf("no note says %q; notes:\n%s", want, notes)
				}
			}
			for _, n := range c.Notes {
				if strings.ContainsAny(n, "\n\r") {
					t.Errorf("a note spans lines: %q", n)
				}
			}
			var refused []string
			for _, r := range c.Refused {
				refused = append(refused, r.Why)
			}
			if (tc.wantRefused == "") != (len(refused) == 0) || (tc.wantRefused != "" && !strings.Contains(strings.Join(refused, "\n"), tc.wantRefused)) {
				t.Errorf("refused %q; want %q", refused, tc.wantRefused)
			}
			for _, tt := range c.Targets {
				if _, err := v1alpha1.ParseTrustTargetSpec(&tt.Spec); err != nil {
					t.Errorf("a TrustTarget offered as ready is refused by the controller: %v", err)
				}
			}
		})
	}
}

func TestFromTrustManager_AMalformedSpecIsSaidInTheUsersTerms(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{name: "a string where an object goes", doc: "apiVersion: trust-manager.io/v1alpha2\nkind: ClusterBundle\nmetadata: {name: c}\nspec: {target: x}",
			want: `ClusterBundle "c": spec.target is a string, where trust-manager's ClusterBundle takes an object`},
		{name: "an object where a list goes", doc: "apiVersion: trust.cert-manager.io/v1alpha1\nkind: Bundle\nmetadata: {name: b}\nspec: {sources: {useDefaultCAs: true}}",
			want: `Bundle "b": spec.sources is an object, where trust-manager's Bundle takes a list`},
		{name: "no spec", doc: "apiVersion: trust-manager.io/v1alpha2\nkind: ClusterBundle\nmetadata: {name: e}", want: `ClusterBundle "e" has no spec`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromTrustManager(bundleFrom(t, tc.doc))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got %v; want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "Go struct") {
				t.Errorf("the error speaks of Go: %v", err)
			}
		})
	}
}
