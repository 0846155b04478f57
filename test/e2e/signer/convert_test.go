package signer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	fallbackroots "golang.org/x/crypto/x509roots/fallback/bundle"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/truststore"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// trustManagerVersion is the trust-manager release whose documented example Bundles
// the conversion is checked against, read from its module as the Go module proxy
// serves it (never copied into this repository).
const trustManagerVersion = "v0.25.0"

// trustManagerModule is trust-manager's module directory, as the Go module proxy
// serves it.
func trustManagerModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/cert-manager/trust-manager@"+trustManagerVersion)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download trust-manager@%s: %v\n%s", trustManagerVersion, err, out)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download: %v\n%s", err, out)
	}
	return mod.Dir
}

// trustManagerExamples are the Bundles trust-manager's README documents, each YAML
// block that declares one.
func trustManagerExamples(t *testing.T) []byte {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(trustManagerModule(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var docs bytes.Buffer
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(readme, -1) {
		if bytes.Contains(m[1], []byte("kind: Bundle")) {
			docs.WriteString("---\n")
			docs.Write(m[1])
		}
	}
	if docs.Len() == 0 {
		t.Fatalf("trust-manager %s's README documents no Bundle", trustManagerVersion)
	}
	return docs.Bytes()
}

// kubectl trustsync convert turns the Bundles trust-manager documents into objects
// that, applied, write what trust-manager says its Bundle writes: a ConfigMap named
// after the Bundle, with the key it names, holding the public roots, in every
// namespace.
func TestConvert_TrustManagersDocumentedBundlesWriteWhatItsDocsSay(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	examples := filepath.Join(t.TempDir(), "bundles.yaml")
	if err := os.WriteFile(examples, trustManagerExamples(t), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := controlplane.NewPlugin(t, cp).Run(t, "convert", "-f", examples)
	if code != 0 {
		t.Fatalf("convert exits %d for trust-manager's documented Bundles; it said:\n%s", code, out)
	}
	dyn := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.TrustTargetResource)
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	var names []string
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("convert printed what does not decode: %v\n%s", err, out)
		}
		if obj.GetKind() != v1alpha1.TrustTargetKind {
			t.Fatalf("convert printed a %s for a Bundle of the public roots alone", obj.GetKind())
		}
		if _, err := dyn.Create(ctx, &obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, obj.GetName())
		t.Cleanup(func() { _ = dyn.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{}) })
	}
	if !slices.Equal(names, []string{"trust-manager-bundle"}) {
		t.Fatalf("convert made %v of the README's Bundle trust-manager-bundle", names)
	}

	var roots []string
	for r := range fallbackroots.Roots() {
		if r.Constraint == nil {
			roots = append(roots, bundle.AnchorID(r.Certificate))
		}
	}
	slices.Sort(roots)
	client := kube(t, cp.AdminConfig())
	namespaces, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range namespaces.Items {
		if ns.Status.Phase == "Terminating" {
			continue
		}
		poll.True(t, time.Minute, "ConfigMap "+ns.Name+"/trust-manager-bundle holding the public roots at bundle.pem", func() bool {
			cm, err := client.CoreV1().ConfigMaps(ns.Name).Get(ctx, "trust-manager-bundle", metav1.GetOptions{})
			if err != nil {
				return false
			}
			got, err := bundle.AnchorIDs([]byte(cm.Data["bundle.pem"]))
			return err == nil && slices.Equal(got, roots)
		})
	}
	t.Logf("%d public roots in trust-manager-bundle/bundle.pem in all %d namespaces", len(roots), len(namespaces.Items))
}

// decodeAll decodes every YAML document convert printed (comments are not documents).
func decodeAll(t *testing.T, out string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("convert printed what does not decode: %v\n%s", err, out)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

// applyConverted applies what convert printed, as kubectl apply would, removed when
// the test ends.
func applyConverted(t *testing.T, cp *controlplane.ControlPlane, out string) {
	t.Helper()
	ctx := context.Background()
	for _, obj := range decodeAll(t, out) {
		raw, err := obj.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		applied, err := controlplane.Apply(ctx, cp.AdminConfig(), raw)
		if err != nil {
			t.Fatalf("the API server refused what convert printed as ready: %v", err)
		}
		for _, a := range applied {
			gvr := v1alpha1.TrustTargetResource
			if a.GetKind() == "ClusterTrustBundle" {
				gvr = certificatesv1.SchemeGroupVersion.WithResource("clustertrustbundles")
			}
			t.Cleanup(func() {
				_ = dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(gvr).Delete(context.Background(), a.GetName(), metav1.DeleteOptions{})
			})
		}
	}
}

// A ClusterBundle written to trust-manager's own CRD (read from its module and served
// by the API server, which validates it), read back as docs/migrate-from-trust-manager.md
// reads it (kubectl get -o yaml: a List), converts field by field: the public roots
// and its inline CAs (a bundle of the API this cluster serves), written as its data
// keys (PEM and PKCS#12) into a ConfigMap in the namespaces it selects; its target
// metadata is named as not carried over.
func TestConvert_ClusterBundlesAsTrustManagersCRDHasThemConvertFieldByField(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	crd, err := os.ReadFile(filepath.Join(trustManagerModule(t), "deploy", "crds", "trust-manager.io_clusterbundles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.Apply(ctx, cp.AdminConfig(), crd); err != nil {
		t.Fatal(err)
	}
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	inline := fixtures.CA("cluster bundle inline")
	clusterBundles := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(schema.GroupVersionResource{Group: "trust-manager.io", Version: "v1alpha2", Resource: "clusterbundles"})
	name := "corp-" + run
	cb := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "trust-manager.io/v1alpha2", "kind": "ClusterBundle", "metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"defaultCAs": map[string]any{"provider": "System"},
			"inLineCAs":  string(inline.CertPEM()),
			"target": map[string]any{
				"configMap": map[string]any{
					"data":     []any{map[string]any{"key": "ca.pem"}, map[string]any{"key": "ca.p12", "format": "PKCS12", "password": "changeit"}},
					"metadata": map[string]any{"labels": map[string]any{"team": "platform"}},
				},
				"namespaceSelector": map[string]any{"matchLabels": map[string]any{"trust": name}},
			}}}}
	// trust-manager's schema (served by the CRD) validates it; the CRD may take a
	// moment to be served.
	poll.True(t, time.Minute, "the ClusterBundle accepted by trust-manager's CRD", func() bool {
		_, err = clusterBundles.Create(ctx, cb, metav1.CreateOptions{})
		return err == nil
	})
	t.Cleanup(func() { _ = clusterBundles.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := controlplane.WriteKubeconfig(kubeconfig, cp.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	bin, err := controlplane.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	listed, err := exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", kubeconfig, "get", "clusterbundles.trust-manager.io", "-o", "yaml").Output()
	if err != nil || !strings.Contains(string(listed), "kind: List") {
		t.Fatalf("kubectl get clusterbundles -o yaml: %v\n%s", err, listed)
	}
	input := filepath.Join(t.TempDir(), "clusterbundles.yaml")
	if err := os.WriteFile(input, listed, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code := controlplane.NewPlugin(t, cp).Output(t, "convert", "-f", input)
	if code != 3 {
		t.Fatalf("convert exits %d; want 3, for the metadata not carried over:\n%s", code, out)
	}
	if !strings.Contains(out, "apiVersion: certificates.k8s.io/v1\nkind: ClusterTrustBundle") {
		t.Errorf("the inline CAs are not a bundle of the native API this cluster serves:\n%s", out)
	}
	for _, want := range []string{"target.configMap.metadata"} {
		if !strings.Contains(out, "# NOT CARRIED OVER: ClusterBundle \""+name+"\": ") || !strings.Contains(out, want) {
			t.Errorf("convert does not say %q is not carried over:\n%s", want, out)
		}
	}
	applyConverted(t, cp, out)

	client := kube(t, cp.AdminConfig())
	controlplane.LabelledNamespace(t, client, name, map[string]string{"trust": name})
	poll.True(t, time.Minute, "the converted ClusterBundle's ConfigMap written with both data keys", func() bool {
		cm, err := client.CoreV1().ConfigMaps(name).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		pem, err := bundle.AnchorIDs([]byte(cm.Data["ca.pem"]))
		store, errP := truststore.DecodePKCS12(cm.BinaryData["ca.p12"], "changeit")
		return err == nil && errP == nil && len(pem) > 100 && slices.Contains(pem, bundle.AnchorID(inline.Cert.Raw)) && len(store) == len(pem)
	})
}

// Whatever the input holds, convert prints only the objects it converted, from a
// YAML encoder: a kind or a name made to look like YAML stays in a one-line comment;
// what the controller would refuse (too many sources) is commented out and named, as
// is a target missing a source that cannot be carried over (a Secret in
// trust-manager's namespace); a Bundle writing a ConfigMap and a Secret becomes two
// targets; exit 3 each time.
func TestConvert_IsSafeToPipeIntoKubectlApply(t *testing.T) {
	cp := planes.Get(t, true)
	var many strings.Builder
	for range 12 {
		many.WriteString("  - useDefaultCAs: true\n")
	}
	ca := fixtures.CA("inline twice")
	twice := string(ca.CertPEM()) + string(ca.CertPEM())
	binding := "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: owned}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\nsubjects: [{kind: Group, name: system:authenticated, apiGroup: rbac.authorization.k8s.io}]\n"
	input := `apiVersion: vendor.example/v1
kind: ` + strconv.Quote("Vendor\n"+binding) + `
metadata: {name: x}
---
apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: ` + strconv.Quote("evil\n"+binding) + `}
spec:
  sources: [{useDefaultCAs: true}]
  target: {configMap: {key: ca.crt}}
---
apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: both}
spec:
  sources: [{useDefaultCAs: true}]
  target: {configMap: {key: ca.crt}, secret: {key: ca.crt}}
---
apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: partial}
spec:
  sources: [{useDefaultCAs: true}, {secret: {name: ca-key-pair, key: tls.crt}}]
  target: {configMap: {key: ca.crt}}
---
apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: many}
spec:
  sources:
` + many.String() + `  target:
    configMap: {key: a.pem}
    additionalFormats: {jks: {key: a.jks}, pkcs12: {key: a.p12, password: changeit}}
---
apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: twice}
spec:
  sources: [{inLine: ` + strconv.Quote(twice) + `}]
  target:
    configMap: {key: ca.crt, metadata: {labels: {app: billing}}}
    additionalFormats: {pkcs12: {key: ca.p12, password: changeit, profile: LegacyRC2}}
`
	file := filepath.Join(t.TempDir(), "input.yaml")
	if err := os.WriteFile(file, []byte(input), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := controlplane.NewPlugin(t, cp).Output(t, "convert", "-f", file)
	if code != 3 {
		t.Errorf("convert exits %d; want 3", code)
	}
	for _, want := range []string{`readers selecting by labels ["app"]`, `PKCS#12 profile "LegacyRC2"`, "duplicate trust anchor (indices [0 1])"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("convert does not say %q on stderr:\n%s", want, stderr)
		}
	}
	var printed []string
	for _, obj := range decodeAll(t, out) {
		printed = append(printed, obj.GetKind()+"/"+obj.GetName())
	}
	if want := []string{"TrustTarget/both", "TrustTarget/both-secret"}; !slices.Equal(printed, want) {
		t.Errorf("convert printed as ready to apply %v; want %v\n%s", printed, want, out)
	}
	// The API server's own word on the inline PEM convert refused.
	_, apiErr := kube(t, cp.AdminConfig()).CertificatesV1().ClusterTrustBundles().Create(context.Background(), &certificatesv1.ClusterTrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "twice-probe"}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: twice}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if apiErr == nil || !strings.Contains(apiErr.Error(), "duplicate trust anchor") {
		t.Fatalf("the API server took the duplicate anchor: %v", apiErr)
	}
	for _, want := range []string{`TrustTarget "many" would be refused: spec.sources: Too many: 36`, `would be refused: metadata.name`,
		`TrustTarget "partial" would be refused: source 1 not carried over`, `"Vendor\n---\napiVersion: rbac`,
		"twice-inline-1 (from the inline CAs) would be refused by the API server", "duplicate trust anchor (indices [0 1])"} {
		if !strings.Contains(out, want) {
			t.Errorf("convert does not say %q:\n%s", want, out)
		}
	}
	applyConverted(t, cp, out)
}
