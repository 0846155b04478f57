// Package chart tests the Helm chart: lint, rendering with default and non-default
// values, and a real `helm install` into a control plane of its own (its fail-closed
// webhooks have no running backend there, so no other test shares it), after which each
// component runs with exactly the chart's ServiceAccount and roles.
package chart

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

var planes controlplane.Shared

func TestMain(m *testing.M) { planes.Main(m) }

const release, ns = "trustsync", "trustsync-system"

func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	bin, err := controlplane.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("../../..")
	if len(args) > 0 && args[0] == "template" {
		args = append(args, controlplane.TemplateKubeVersion)
	}
	cmd := exec.Command(filepath.Join(bin, "helm"), args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// renderSet renders the chart with one --set, returning helm's output and error, for a
// value that may be refused.
func renderSet(t *testing.T, set string) (string, error) {
	t.Helper()
	bin, err := controlplane.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "helm"), "template", release, "charts/trustsync", controlplane.TemplateKubeVersion, "--set", set)
	cmd.Dir, _ = filepath.Abs("../../..")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// objects decodes a rendered manifest.
func objects(t *testing.T, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return o
		}
	}
	return nil
}

func TestChart_Lints(t *testing.T) {
	helm(t, "lint", "--strict", "charts/trustsync")
}

// The chart installs every CRD of files/crds as written (its schema, CEL rules
// included, survives the template), labelled as the release's objects and kept on
// uninstall; crds.keep=false lets an uninstall delete them; crds.enabled=false
// installs none.
func TestChart_RendersEveryCRDAsItsFileKeptOnUninstall(t *testing.T) {
	files, err := filepath.Glob("../../../charts/trustsync/files/crds/*.yaml")
	if err != nil || len(files) < 5 {
		t.Fatalf("CRD files: %v, %v", files, err)
	}
	want := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := sigsyaml.UnmarshalStrict(data, crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		want[crd.Name] = crd
	}
	crdsOf := func(args ...string) map[string]*apiextensionsv1.CustomResourceDefinition {
		out := map[string]*apiextensionsv1.CustomResourceDefinition{}
		for _, obj := range objects(t, helm(t, append([]string{"template", release, "charts/trustsync", "-n", ns}, args...)...)) {
			if obj.GetKind() != "CustomResourceDefinition" {
				continue
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, crd); err != nil {
				t.Fatal(err)
			}
			out[crd.Name] = crd
		}
		return out
	}
	got := crdsOf("--set", "commonLabels.team=trust")
	if len(got) != len(want) {
		t.Fatalf("the chart renders %d CRDs, files/crds holds %d", len(got), len(want))
	}
	for name, w := range want {
		g := got[name]
		if g == nil {
			t.Errorf("CRD %s is not rendered", name)
			continue
		}
		if !equality.Semantic.DeepEqual(g.Spec, w.Spec) {
			t.Errorf("CRD %s: the rendered spec differs from the file's", name)
		}
		if g.Annotations["helm.sh/resource-policy"] != "keep" || g.Labels["app.kubernetes.io/managed-by"] != "Helm" || g.Labels["team"] != "trust" || g.Labels["app.kubernetes.io/part-of"] != "trustsync" {
			t.Errorf("CRD %s: annotations %v, labels %v; want kept, the release's labels and commonLabels", name, g.Annotations, g.Labels)
		}
	}
	for name, g := range crdsOf("--set", "crds.keep=false") {
		if _, kept := g.Annotations["helm.sh/resource-policy"]; kept {
			t.Errorf("crds.keep=false: CRD %s is still kept", name)
		}
	}
	if n := len(crdsOf("--set", "crds.enabled=false")); n != 0 {
		t.Errorf("crds.enabled=false renders %d CRDs", n)
	}
}

// helm show readme prints the chart's README, values reference included, as a user
// reads it before installing (hack/chartdoc keeps it equal to values.yaml).
func TestChart_HelmShowReadmePrintsEveryValue(t *testing.T) {
	readme := string(helm(t, "show", "readme", "charts/trustsync"))
	values := string(helm(t, "show", "values", "charts/trustsync"))
	if !strings.Contains(readme, "## Values") {
		t.Fatalf("helm show readme prints no values reference:\n%s", readme)
	}
	for _, key := range []string{"tenancy.enforced", "agent.namespace", "webhook.port", "signer.caPropagationMinWait", "targets.secrets"} {
		if !strings.Contains(values, strings.Split(key, ".")[1]+":") || !strings.Contains(readme, "| `"+key+"` |") {
			t.Errorf("helm show readme has no row for %s", key)
		}
	}
}

func TestChart_Renders(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, objs []*unstructured.Unstructured)
	}{
		{
			name: "defaults: self-managed TLS, webhooks pointing at the Service, signer and sidecar roles",
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				args, _, _ := unstructured.NestedSlice(find(objs, "Deployment", "trustsync-webhook").Object, "spec", "template", "spec", "containers")
				if !strings.Contains(toString(args), "--self-managed-tls") {
					t.Error("the webhook does not manage its TLS by default")
				}
				for _, kind := range []string{"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} {
					hooks, _, _ := unstructured.NestedSlice(find(objs, kind, "").Object, "webhooks")
					for _, h := range hooks {
						svc, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "name")
						if svc != "trustsync-webhook" {
							t.Errorf("%s webhook does not point at the Service: %v", kind, h)
						}
					}
				}
				for _, name := range []string{"trustsync-signer", "trustsync-sidecar-read-bundles", "trustsync-sidecar-events", "trustsync-sidecar-certificate-requests"} {
					if find(objs, "ClusterRole", name) == nil {
						t.Errorf("ClusterRole %s missing", name)
					}
				}
			},
		},
		{
			name: "cert-manager mode: an Issuer, a Certificate, the CA injected, files served",
			args: []string{"--set", "certManager.enabled=true"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				if find(objs, "Certificate", "trustsync-webhook") == nil || find(objs, "Issuer", "trustsync-webhook") == nil {
					t.Error("no Certificate and Issuer")
				}
				if v := find(objs, "ValidatingWebhookConfiguration", ""); v.GetAnnotations()["cert-manager.io/inject-ca-from"] != ns+"/trustsync-webhook" {
					t.Errorf("annotations = %v", v.GetAnnotations())
				}
				args, _, _ := unstructured.NestedSlice(find(objs, "Deployment", "trustsync-webhook").Object, "spec", "template", "spec", "containers")
				if s := toString(args); strings.Contains(s, "--self-managed-tls") || !strings.Contains(s, "--tls-cert-file=/etc/trustsync/tls/tls.crt") {
					t.Error("the webhook does not serve cert-manager's files")
				}
			},
		},
		{
			name: "sidecar roles switch off, the signer too",
			args: []string{"--set", "sidecarRBAC.readBundles=false", "--set", "sidecarRBAC.certificateRequests=false", "--set", "signer.enabled=false"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				for _, name := range []string{"trustsync-sidecar-read-bundles", "trustsync-sidecar-certificate-requests", "trustsync-signer"} {
					if find(objs, "ClusterRole", name) != nil {
						t.Errorf("ClusterRole %s rendered though switched off", name)
					}
				}
				if find(objs, "Deployment", "trustsync-signer") != nil {
					t.Error("the signer rendered though disabled")
				}
			},
		},
		{
			name: "the node agent: a CSIDriver for inline volumes with the pod's token, a DaemonSet on the kubelet's directories; switched off, neither",
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				d := find(objs, "CSIDriver", "csi.trustsync.io")
				if d == nil {
					t.Fatal("no CSIDriver")
				}
				spec, _, _ := unstructured.NestedMap(d.Object, "spec")
				if toString(spec["volumeLifecycleModes"]) != `["Ephemeral"]` || spec["podInfoOnMount"] != true || spec["requiresRepublish"] != true || spec["tokenRequests"] == nil {
					t.Errorf("CSIDriver spec = %v", spec)
				}
				ds := find(objs, "DaemonSet", "trustsync-agent")
				if ds == nil {
					t.Fatal("no agent DaemonSet")
				}
				if s := toString(ds.Object); !strings.Contains(s, "/var/lib/kubelet/plugins_registry") || !strings.Contains(s, "Bidirectional") {
					t.Error("the agent does not mount the kubelet's plugin registry, or its pods without mount propagation")
				}
				rules, _, _ := unstructured.NestedSlice(find(objs, "ClusterRole", "trustsync-agent").Object, "rules")
				if s := toString(rules); strings.Contains(s, "configmaps") || strings.Contains(s, "secrets") || strings.Contains(s, "certificatesigningrequests") {
					t.Errorf("the agent may read ConfigMaps or Secrets, or request certificates, itself: %v", rules)
				}
			},
		},
		{
			name: "the webhook serves on 10250, which private managed control planes reach, behind the Service's 443",
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				d := find(objs, "Deployment", "trustsync-webhook")
				if s := toString(d.Object["spec"]); !strings.Contains(s, `"--secure-port=10250"`) || !strings.Contains(s, `"containerPort":10250,"name":"https"`) {
					t.Errorf("the webhook's pod spec: %s", s)
				}
				svc := find(objs, "Service", "trustsync-webhook")
				if s := toString(svc.Object["spec"]); !strings.Contains(s, `"port":443`) {
					t.Errorf("the webhook's Service: %s", s)
				}
			},
		},
		{
			name: "the agent in a namespace of its own: its DaemonSet, ServiceAccount, bindings, metrics and reports policy follow it; the rest stays",
			args: []string{"--set", "agent.namespace=trustsync-agent", "--set", "prometheus.serviceMonitor.enabled=true"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				for _, o := range objs {
					agent := o.GetLabels()["app.kubernetes.io/component"] == "agent"
					if o.GetNamespace() == "" || o.GetKind() == "ServiceMonitor" && !agent {
						continue
					}
					if want := map[bool]string{true: "trustsync-agent", false: ns}[agent]; o.GetNamespace() != want {
						t.Errorf("%s %s is in %s, want %s", o.GetKind(), o.GetName(), o.GetNamespace(), want)
					}
				}
				for _, ref := range []struct{ kind, name string }{{"ClusterRoleBinding", "trustsync-agent"}, {"RoleBinding", "trustsync-injected-index-reader"}} {
					b := find(objs, ref.kind, ref.name)
					if b == nil || !strings.Contains(toString(b.Object["subjects"]), `{"kind":"ServiceAccount","name":"trustsync-agent","namespace":"trustsync-agent"}`) {
						t.Errorf("%s %s does not bind the agent in its namespace: %v", ref.kind, ref.name, b)
					}
				}
				if p := find(objs, "ValidatingAdmissionPolicy", "trustsync-node-reports"); p == nil || !strings.Contains(toString(p.Object), "system:serviceaccount:trustsync-agent:trustsync-agent") {
					t.Error("the node-reports policy does not know the agent by its namespace")
				}
				if sm := find(objs, "ServiceMonitor", "trustsync-agent"); sm == nil || !strings.Contains(toString(sm.Object), `"matchNames":["trustsync-agent"]`) {
					t.Error("the agent's ServiceMonitor does not look in its namespace")
				}
			},
		},
		{
			name: "the conventions of cert-manager's and trust-manager's charts: common labels everywhere, per-component pod labels, annotations, spread and ServiceAccount annotations, a registry, a log format, a namespace selector",
			args: []string{"--set", "commonLabels.team=platform", "--set", "webhook.podLabels.tier=admission", "--set", "controller.podAnnotations.scrape=yes",
				"--set", "agent.serviceAccount.annotations.iam=agent-role", "--set", "image.registry=mirror.example/", "--set", "logFormat=json",
				"--set", "webhook.namespaceSelector.matchLabels.trust=wanted", "--set", "signer.topologySpreadConstraints[0].maxSkew=1",
				"--set", "signer.topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone", "--set", "signer.topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				for _, o := range objs {
					if o.GetLabels()["team"] != "platform" {
						t.Errorf("%s %s lacks the common label", o.GetKind(), o.GetName())
					}
				}
				w := map[string]map[string]any{}
				for _, c := range []string{"webhook", "signer", "controller", "agent"} {
					kind := map[bool]string{true: "DaemonSet", false: "Deployment"}[c == "agent"]
					d := find(objs, kind, "trustsync-"+c)
					tpl, _, _ := unstructured.NestedMap(d.Object, "spec", "template")
					w[c] = tpl
					if s := toString(tpl); !strings.Contains(s, `"image":"mirror.example/ghcr.io/trustsync/trustsync:v`) || !strings.Contains(s, `"--logging-format=json"`) || !strings.Contains(s, `"team":"platform"`) {
						t.Errorf("%s: want the mirror's image, JSON logs and the common label on its pods: %s", c, s)
					}
				}
				if l, _, _ := unstructured.NestedString(w["webhook"], "metadata", "labels", "tier"); l != "admission" {
					t.Errorf("the webhook's pods lack podLabels: %v", w["webhook"]["metadata"])
				}
				if a, _, _ := unstructured.NestedString(w["controller"], "metadata", "annotations", "scrape"); a != "yes" {
					t.Errorf("the controller's pods lack podAnnotations: %v", w["controller"]["metadata"])
				}
				if a, _, _ := unstructured.NestedString(w["webhook"], "metadata", "annotations", "checksum/policy"); a == "" {
					t.Error("the webhook's pods lost the policy checksum")
				}
				if c, _, _ := unstructured.NestedSlice(w["signer"], "spec", "topologySpreadConstraints"); len(c) != 1 {
					t.Errorf("the signer's pods: topologySpreadConstraints %v", c)
				}
				if sa := find(objs, "ServiceAccount", "trustsync-agent"); sa.GetAnnotations()["iam"] != "agent-role" {
					t.Errorf("the agent's ServiceAccount annotations: %v", sa.GetAnnotations())
				}
				hooks, _, _ := unstructured.NestedSlice(find(objs, "MutatingWebhookConfiguration", "trustsync").Object, "webhooks")
				podHooks := 0
				for _, h := range hooks {
					if h.(map[string]any)["name"] != "pods.trustsync.io" {
						continue
					}
					podHooks++
					sel := toString(h.(map[string]any)["namespaceSelector"])
					if !strings.Contains(sel, `"matchLabels":{"trust":"wanted"}`) || !strings.Contains(sel, `"kube-system"`) {
						t.Errorf("the pod webhook's namespaceSelector: %s; want the user's labels and the built-in exclusions", sel)
					}
				}
				if podHooks != 1 {
					t.Errorf("%d webhooks named pods.trustsync.io", podHooks)
				}
			},
		},
		{
			name: "the node agent switched off",
			args: []string{"--set", "agent.enabled=false"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				if find(objs, "CSIDriver", "") != nil || find(objs, "DaemonSet", "") != nil || find(objs, "ClusterRole", "trustsync-agent") != nil {
					t.Error("the agent rendered though disabled")
				}
			},
		},
		{
			name: "the NetworkPolicy admits the API server (and extra peers) to the HTTPS port, any prober to the health port",
			args: []string{"--set", "webhook.networkPolicy.enabled=true", "--set", "webhook.networkPolicy.apiServerCIDRs={10.0.0.10/32}",
				"--set", "webhook.networkPolicy.extraFrom[0].namespaceSelector.matchLabels.name=monitoring"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				np := find(objs, "NetworkPolicy", "trustsync-webhook")
				if np == nil {
					t.Fatal("no NetworkPolicy")
				}
				ingress, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
				if s := toString(ingress); len(ingress) != 2 || !strings.Contains(s, `{"ipBlock":{"cidr":"10.0.0.10/32"}}`) || !strings.Contains(s, `"monitoring"`) ||
					!strings.Contains(s, `"port":10250`) || !strings.Contains(s, `[{"port":8081,"protocol":"TCP"}]`) {
					t.Errorf("ingress = %s", s)
				}
			},
		},
		{
			name: "no NetworkPolicy by default; the review memory bound is passed on",
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				if find(objs, "NetworkPolicy", "") != nil {
					t.Error("a NetworkPolicy rendered by default")
				}
				args, _, _ := unstructured.NestedSlice(find(objs, "Deployment", "trustsync-webhook").Object, "spec", "template", "spec", "containers")
				if !strings.Contains(toString(args), "--max-review-bytes-in-flight=12582912") {
					t.Error("the webhook is not given its review memory bound")
				}
			},
		},
		{
			name: "names and image are overridable",
			args: []string{"--set", "fullnameOverride=ts", "--set", "image.repository=registry.example/ts", "--set", "image.tag=v9"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				d := find(objs, "Deployment", "ts-webhook")
				if d == nil || !strings.Contains(toString(d.Object), "registry.example/ts:v9") {
					t.Error("overrides not applied")
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, objects(t, helm(t, append([]string{"template", release, "charts/trustsync", "--namespace", ns}, tc.args...)...)))
		})
	}
	for _, tc := range []struct{ name, set, want string }{
		{"bad values are refused by the schema", "webhook.defaultSidecarMode=sidecar", "/webhook/defaultSidecarMode"},
		{"a NetworkPolicy without the API server's addresses is refused", "webhook.networkPolicy.enabled=true", "webhook.networkPolicy.apiServerCIDRs must list the API server's addresses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := renderSet(t, tc.set)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("err = %v, output %s", err, out)
			}
		})
	}
}

// toString is an object's JSON, for checking what it contains.
func toString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// chartArg is the value of a flag the chart gives the webhook.
func chartArg(t *testing.T, manifest []byte, flag string) string {
	t.Helper()
	for _, line := range strings.Split(string(manifest), "\n") {
		if _, value, ok := strings.Cut(strings.TrimSpace(line), "- "+flag+"="); ok {
			return value
		}
	}
	t.Fatalf("the chart gives no component %s", flag)
	return ""
}

// serviceAccountKubeconfig writes a kubeconfig for one of the chart's ServiceAccounts.
func serviceAccountKubeconfig(t *testing.T, cp *controlplane.ControlPlane, namespace, name string) string {
	t.Helper()
	cfg, err := cp.ServiceAccountConfig(context.Background(), namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := controlplane.WriteKubeconfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	return path
}

// startFor starts a component whose process lives as long as owner (the whole test),
// reporting through t.
func startFor(t, owner *testing.T, name string, args ...string) *controlplane.Process {
	t.Helper()
	bin, err := controlplane.BuildBinary(name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := controlplane.StartProcess("trustsync-"+name, bin, args, filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	owner.Cleanup(func() {
		p.Stop(5 * time.Second)
		if owner.Failed() {
			owner.Logf("%s log:\n%s", name, p.Tail())
		}
	})
	return p
}

// eventually waits a minute for cond, showing p's log when it fails.
func eventually(t *testing.T, what string, p *controlplane.Process, cond func(context.Context) (bool, error)) {
	t.Helper()
	if p != nil {
		defer func() {
			if t.Failed() {
				t.Logf("%s's log:\n%s", what, p.Tail())
			}
		}()
	}
	poll.NoError(t, time.Minute, what, cond)
}

// adminKubeconfig writes a cluster-admin kubeconfig of cp, for helm and kubectl.
func adminKubeconfig(t *testing.T, cp *controlplane.ControlPlane) string {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "admin")
	if err := controlplane.WriteKubeconfig(kubeconfig, cp.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

func TestChart_InstallsAndEachComponentWorksWithTheChartsRBAC(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	kubeconfig := adminKubeconfig(t, cp)
	helm(t, "install", release, "charts/trustsync", "--namespace", ns, "--create-namespace", "--kubeconfig", kubeconfig)
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}

	// Every object of the release was accepted.
	manifest := helm(t, "get", "manifest", release, "--namespace", ns, "--kubeconfig", kubeconfig)
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objects(t, manifest) {
		if _, err := controlplane.Get(ctx, cp.AdminConfig(), o); err != nil {
			t.Errorf("%s %s was not stored: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if _, err := bundleapi.NewStore(dyn, bundle.Mirror).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the mirror CRD from crds/ is not served: %v", err)
	}
	v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, release, metav1.GetOptions{})
	if err != nil || v.Webhooks[0].ClientConfig.Service == nil || v.Webhooks[0].ClientConfig.Service.Name != "trustsync-webhook" || v.Webhooks[0].ClientConfig.Service.Namespace != ns {
		t.Fatalf("the webhook configuration does not point at the Service: %+v, %v", v, err)
	}

	var webhookPort int
	parent := t
	t.Run("the webhook manages its TLS as its ServiceAccount", func(t *testing.T) {
		port, _ := controlplane.FreePort()
		webhookPort = port
		policy := filepath.Join(t.TempDir(), "policy.yaml")
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "trustsync-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(policy, []byte(cm.Data["policy.yaml"]), 0o600)
		p := startFor(t, parent, "webhook", "--kubeconfig="+serviceAccountKubeconfig(t, cp, ns, "trustsync-webhook"), "--namespace="+ns,
			"--self-managed-tls", "--tls-secret-name=trustsync-webhook-tls", "--service-name=trustsync-webhook", "--webhook-configuration-name=trustsync",
			"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port), "--health-bind-address=", "--policy="+policy)
		eventually(t, "the webhook set its CA in both configurations", p, func(ctx context.Context) (bool, error) {
			secret, err := client.CoreV1().Secrets(ns).Get(ctx, "trustsync-webhook-tls", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			v, _ := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, release, metav1.GetOptions{})
			m, _ := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, release, metav1.GetOptions{})
			return bytes.Equal(v.Webhooks[0].ClientConfig.CABundle, secret.Data["ca.crt"]) && bytes.Equal(m.Webhooks[0].ClientConfig.CABundle, secret.Data["ca.crt"]), nil
		})
		eventually(t, "the webhook recorded generating its certificate on the Secret", p, func(ctx context.Context) (bool, error) {
			events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Secret,involvedObject.name=trustsync-webhook-tls,reason=WebhookCertificateGenerated"})
			return err == nil && len(events.Items) == 1, nil
		})
		lease, err := client.CoordinationV1().Leases(ns).Get(ctx, "trustsync-webhook-tls", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			t.Fatalf("the webhook holds no Lease for its Secret: %v, %v", lease, err)
		}

		// A second replica, without the Lease, serves the Secret's certificate.
		port2, _ := controlplane.FreePort()
		p2 := startFor(t, parent, "webhook", "--kubeconfig="+serviceAccountKubeconfig(t, cp, ns, "trustsync-webhook"), "--namespace="+ns,
			"--self-managed-tls", "--tls-secret-name=trustsync-webhook-tls", "--service-name=trustsync-webhook", "--webhook-configuration-name=trustsync",
			"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port2), "--health-bind-address=", "--policy="+policy)
		secret, err := client.CoreV1().Secrets(ns).Get(ctx, "trustsync-webhook-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(secret.Data["ca.crt"])
		eventually(t, "the second replica serves the Secret's certificate", p2, func(context.Context) (bool, error) {
			conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port2), &tls.Config{RootCAs: roots, ServerName: "trustsync-webhook.trustsync-system.svc"})
			if err != nil {
				return false, nil
			}
			defer conn.Close()
			block, _ := pem.Decode(secret.Data["tls.crt"])
			return block != nil && bytes.Equal(conn.ConnectionState().PeerCertificates[0].Raw, block.Bytes), nil
		})
		if again, _ := client.CoordinationV1().Leases(ns).Get(ctx, "trustsync-webhook-tls", metav1.GetOptions{}); *again.Spec.HolderIdentity != *lease.Spec.HolderIdentity {
			t.Errorf("the Lease moved to the second replica")
		}
	})

	t.Run("a tenant's ServiceAccounts may write Events in their own namespace only, and enumerate no CSRs", func(t *testing.T) {
		for _, name := range []string{"tenant-a", "tenant-b"} {
			if err := cp.CreateNamespace(ctx, name, nil); err != nil {
				t.Fatal(err)
			}
		}
		// The controller, as its ServiceAccount and with the chart's flag, binds the
		// sidecar's Event role in each namespace the injector serves, to that
		// namespace's ServiceAccounts. (Without the Lease, so that the controller the
		// TrustTarget test starts later takes it at once.)
		p := startFor(t, t, "controller", "--kubeconfig="+serviceAccountKubeconfig(t, cp, ns, "trustsync-controller"), "--namespace="+ns,
			"--health-bind-address=", "--leader-elect=false", "--targets=false", "--federation=false",
			"--sidecar-events-cluster-role="+chartArg(t, manifest, "--sidecar-events-cluster-role"))
		eventually(t, "the controller bound the Event role in both tenants' namespaces", p, func(ctx context.Context) (bool, error) {
			for _, name := range []string{"tenant-a", "tenant-b"} {
				rb, err := client.RbacV1().RoleBindings(name).Get(ctx, "trustsync-sidecar-events", metav1.GetOptions{})
				if err != nil || len(rb.Subjects) != 1 || rb.Subjects[0].Name != "system:serviceaccounts:"+name {
					return false, nil
				}
			}
			return true, nil
		})
		if _, err := client.RbacV1().RoleBindings("kube-system").Get(ctx, "trustsync-sidecar-events", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("kube-system got a sidecar Event binding (err %v); the injector never serves it", err)
		}
		tenant := authenticationv1.UserInfo{Username: "system:serviceaccount:tenant-a:default",
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:tenant-a", "system:authenticated"}}
		for _, tc := range []struct {
			verb, group, resource, namespace, name string
			want                                   bool
		}{
			{"create", "", "events", "tenant-a", "", true},
			{"patch", "", "events", "tenant-a", "", true},
			{"create", "", "events", "kube-system", "", false},
			{"create", "", "events", "tenant-b", "", false},
			{"list", "certificates.k8s.io", "certificatesigningrequests", "", "", false},
			{"watch", "certificates.k8s.io", "certificatesigningrequests", "", "", false},
			{"create", "certificates.k8s.io", "certificatesigningrequests", "", "", true},
			{"get", "certificates.k8s.io", "certificatesigningrequests", "", "trustsync-web-0123456789abcdef", true},
			{"list", "certificates.k8s.io", "clustertrustbundles", "", "", true},
		} {
			sar, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: tenant.Username, Groups: tenant.Groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: tc.verb, Group: tc.group, Resource: tc.resource, Namespace: tc.namespace, Name: tc.name},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed != tc.want {
				t.Errorf("can %s %s %s in %q (as tenant-a's default ServiceAccount): %v, want %v", tc.verb, tc.resource, tc.name, tc.namespace, sar.Status.Allowed, tc.want)
			}
		}
		// The controller may keep that one binding and no other: not cluster-admin,
		// which RBAC refuses, and not its own ClusterRole, whose rights it holds and
		// so RBAC would let it hand on, nor the Event role to anyone but the
		// namespace's own ServiceAccounts, which the admission policy refuses. The
		// webhook, which any pod can reach, may bind none.
		group := func(name string) rbacv1.Subject {
			return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
		}
		for _, tc := range []struct {
			serviceAccount, namespace, name, role string
			subject                               rbacv1.Subject
			want                                  string // in the refusal
		}{
			{"trustsync-controller", "tenant-a", "escalate", "cluster-admin", group("system:serviceaccounts:tenant-a"), "not currently held"},
			{"trustsync-controller", "kube-system", "escalate", "trustsync-controller", group("system:serviceaccounts:tenant-a"), "may write only RoleBinding trustsync-sidecar-events"},
			{"trustsync-controller", "tenant-a", "trustsync-sidecar-events", "trustsync-controller", group("system:serviceaccounts:tenant-a"), "binds ClusterRole trustsync-controller"},
			{"trustsync-controller", "tenant-b", "trustsync-sidecar-events", "trustsync-sidecar-events", group("system:serviceaccounts:tenant-a"), "group system:serviceaccounts:tenant-b"},
			{"trustsync-controller", "tenant-b", "trustsync-sidecar-events", "trustsync-sidecar-events", group("system:authenticated"), "group system:serviceaccounts:tenant-b"},
			{"trustsync-webhook", "tenant-a", "escalate", "cluster-admin", group("system:serviceaccounts:tenant-a"), `cannot create resource "rolebindings"`},
			{"trustsync-webhook", "tenant-a", "escalate", "trustsync-sidecar-events", group("system:serviceaccounts:tenant-a"), `cannot create resource "rolebindings"`},
		} {
			cfg, err := cp.ServiceAccountConfig(ctx, ns, tc.serviceAccount)
			if err != nil {
				t.Fatal(err)
			}
			_, err = kubernetes.NewForConfigOrDie(cfg).RbacV1().RoleBindings(tc.namespace).Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: tc.name},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: tc.role},
				Subjects:   []rbacv1.Subject{tc.subject},
			}, metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s binding %s to %s in %s: err = %v, want Forbidden saying %q", tc.serviceAccount, tc.role, tc.subject.Name, tc.namespace, err, tc.want)
			}
		}
	})

	t.Run("the signer creates its CA, takes its Lease and publishes as its ServiceAccount", func(t *testing.T) {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "trustsync-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		policy := filepath.Join(t.TempDir(), "policy.yaml")
		_ = os.WriteFile(policy, []byte(cm.Data["policy.yaml"]), 0o600)
		port, _ := controlplane.FreePort()
		p := startFor(t, parent, "signer", "--kubeconfig="+serviceAccountKubeconfig(t, cp, ns, "trustsync-signer"), "--namespace="+ns, "--policy="+policy,
			"--health-bind-address=127.0.0.1:"+strconv.Itoa(port), "--leader-elect-retry-period=500ms")
		eventually(t, "the signer published its live bundle", p, func(ctx context.Context) (bool, error) {
			_, err := bundleapi.NewStore(dyn, bundle.NativeV1).Get(ctx, "trustsync.io:workload:live")
			return err == nil, nil
		})
		if _, err := client.CoreV1().Secrets(ns).Get(ctx, "trustsync-ca-trustsync.io-workload", metav1.GetOptions{}); err != nil {
			t.Errorf("no CA Secret: %v", err)
		}
		if _, err := client.CoordinationV1().Leases(ns).Get(ctx, "trustsync-signer", metav1.GetOptions{}); err != nil {
			t.Errorf("no Lease: %v", err)
		}
		// Its Role reaches its CA Secrets alone: not the webhook's TLS key beside them.
		cfg, err := cp.ServiceAccountConfig(ctx, ns, "trustsync-signer")
		if err != nil {
			t.Fatal(err)
		}
		asSigner := kubernetes.NewForConfigOrDie(cfg).CoreV1().Secrets(ns)
		if _, err := asSigner.Get(ctx, "trustsync-webhook-tls", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the signer's ServiceAccount reading the webhook's TLS Secret: err = %v, want Forbidden", err)
		}
		if _, err := asSigner.List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the signer's ServiceAccount listing every Secret: err = %v, want Forbidden", err)
		}
		if _, err := asSigner.Get(ctx, "trustsync-ca-trustsync.io-workload", metav1.GetOptions{}); err != nil {
			t.Errorf("the signer's ServiceAccount reading its own CA Secret: %v", err)
		}
	})

	t.Run("no ServiceAccount of the chart may both read a CA key and write cluster-wide", func(t *testing.T) {
		can := func(sa string, a authorizationv1.ResourceAttributes) bool {
			t.Helper()
			sar, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "system:serviceaccount:" + ns + ":" + sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &a,
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return sar.Status.Allowed
		}
		caKey := authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: ns, Name: "trustsync-ca-trustsync.io-workload"}
		clusterWide := []authorizationv1.ResourceAttributes{
			{Verb: "patch", Resource: "configmaps", Namespace: "default"},
			{Verb: "create", Resource: "configmaps", Namespace: "kube-system"},
			{Verb: "patch", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"},
			{Verb: "patch", Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"},
			{Verb: "patch", Group: "apiregistration.k8s.io", Resource: "apiservices"},
			{Verb: "patch", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"},
			{Verb: "list", Resource: "secrets"},
		}
		accounts, err := client.CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=trustsync"})
		if err != nil || len(accounts.Items) < 4 {
			t.Fatalf("the chart's ServiceAccounts: %v, %v", accounts, err)
		}
		for _, sa := range accounts.Items {
			var writes []string
			for _, a := range clusterWide {
				if can(sa.Name, a) {
					writes = append(writes, a.Verb+" "+a.Resource+" in "+a.Namespace)
				}
			}
			if can(sa.Name, caKey) && len(writes) > 0 {
				t.Errorf("%s may read the CA key and also %v", sa.Name, writes)
			}
		}
		if !can("trustsync-signer", caKey) {
			t.Error("the signer may not read its CA key")
		}
		if can("trustsync-controller", caKey) || can("trustsync-controller", authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "default"}) {
			t.Error("the controller may read Secrets though targets.secrets is off")
		}
		if !can("trustsync-controller", clusterWide[0]) || !can("trustsync-controller", clusterWide[2]) {
			t.Error("the controller may not write what TrustTargets and injection need")
		}
		index := authorizationv1.ResourceAttributes{Verb: "watch", Resource: "configmaps", Namespace: ns, Name: "trustsync-injected"}
		other := authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: ns, Name: "anything-else"}
		for _, sa := range []string{"trustsync-signer", "trustsync-agent"} {
			if !can(sa, index) {
				t.Errorf("%s may not read the controller's index of annotated objects", sa)
			}
			if can(sa, other) || can(sa, authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps", Namespace: ns}) {
				t.Errorf("%s may read ConfigMaps other than the index", sa)
			}
		}
	})

	t.Run("a sidecar reads bundles as any ServiceAccount, through the chart's sidecar role", func(t *testing.T) {
		if err := cp.CreateNamespace(ctx, "apps", nil); err != nil {
			t.Fatal(err)
		}
		a := fixtures.CA("chart test")
		if _, err := bundleapi.NewStore(dyn, bundle.NativeV1).Create(ctx, &certificatesv1.ClusterTrustBundle{
			ObjectMeta: metav1.ObjectMeta{Name: "chart-root"}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: fixtures.Bundle(a)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cp.CreateServiceAccount(ctx, "apps", "anyone"); err != nil {
			t.Fatal(err)
		}
		pod, err := client.CoreV1().Pods("apps").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "anyone"},
			Spec: corev1.PodSpec{ServiceAccountName: "anyone", Containers: []corev1.Container{{Name: "app", Image: "x"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := cp.StartSidecar(t, "apps", "anyone", pod, "run", contract.Flag(contract.FlagSources, `[{"name": "chart-root", "path": "ca.pem"}]`))
		p := bundle.NewPool()
		p.AddDER(a.Cert.Raw)
		s.WaitFor(t, "ca.pem", p.PEM())
	})

	t.Run("the webhook asks SubjectAccessReviews and reads namespaces as its ServiceAccount", func(t *testing.T) {
		secret, err := client.CoreV1().Secrets(ns).Get(ctx, "trustsync-webhook-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(secret.Data["ca.crt"])
		// The serving certificate names the Service; the request goes to the process.
		https := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "trustsync-webhook.trustsync-system.svc"}}}
		review := func(path string, kind metav1.GroupVersionKind, namespace string, obj any) *admissionv1.AdmissionResponse {
			raw, _ := json.Marshal(obj)
			body, _ := json.Marshal(admissionv1.AdmissionReview{
				TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
				Request: &admissionv1.AdmissionRequest{UID: "chart", Kind: kind, Operation: admissionv1.Create, Namespace: namespace,
					UserInfo: authenticationv1.UserInfo{Username: "mallory"}, Object: runtime.RawExtension{Raw: raw}},
			})
			resp, err := https.Post("https://127.0.0.1:"+strconv.Itoa(webhookPort)+path, "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			out := &admissionv1.AdmissionReview{}
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil || out.Response == nil {
				t.Fatalf("HTTP %d: %v", resp.StatusCode, err)
			}
			return out.Response
		}
		// Attest: a SubjectAccessReview for mallory, who may not attest: denied, not errored.
		mirror := &certificatesv1.ClusterTrustBundle{TypeMeta: metav1.TypeMeta{APIVersion: "trustsync.io/v1alpha1", Kind: "ClusterTrustBundle"},
			ObjectMeta: metav1.ObjectMeta{Name: "example.com--s--live"}, Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: "example.com/s", TrustBundle: fixtures.Bundle(fixtures.CA("x"))}}
		resp := review("/validate/clustertrustbundles", metav1.GroupVersionKind{Group: "trustsync.io", Version: "v1alpha1", Kind: "ClusterTrustBundle"}, "", mirror)
		if resp.Allowed || !strings.Contains(resp.Result.Message, `user not permitted to attest for signerName "example.com/s"`) {
			t.Errorf("attest review = %+v", resp.Result)
		}
		// Namespace defaults: the namespace is read and its annotation used.
		if err := cp.CreateNamespace(ctx, "defaults", nil); err != nil {
			t.Fatal(err)
		}
		nsObj, _ := client.CoreV1().Namespaces().Get(ctx, "defaults", metav1.GetOptions{})
		nsObj.Annotations = map[string]string{"trustsync.io/signer-name": "example.com/from-namespace"}
		if _, err := client.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"trustsync.io/inject": "true"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "x"}}}}
		eventually(t, "the namespace default reached the injection", nil, func(context.Context) (bool, error) {
			resp := review("/mutate/pods", metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, "defaults", pod)
			return resp.Allowed && strings.Contains(string(resp.Patch), "example.com/from-namespace"), nil
		})
	})

	t.Run("the signer approves and signs CSRs as its ServiceAccount", func(t *testing.T) {
		// The chart's CSR webhooks have no backend in this control plane; having checked
		// them, take them away so CSRs reach the signer.
		if err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, release, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, release, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		cfg, err := cp.ServiceAccountConfig(ctx, "apps", "anyone")
		if err != nil {
			t.Fatal(err)
		}
		requester, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		uri, _ := url.Parse("spiffe://cluster.local/ns/apps/sa/anyone")
		request, _ := fixtures.CSR("", nil, []*url.URL{uri})
		csr, err := requester.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "anyone-"},
			Spec: certificatesv1.CertificateSigningRequestSpec{SignerName: "trustsync.io/workload", Request: request,
				Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a ServiceAccount could not create a CSR through the chart's sidecar role: %v", err)
		}
		eventually(t, "the signer approved and signed", nil, func(ctx context.Context) (bool, error) {
			got, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
			return err == nil && len(got.Status.Certificate) > 0, nil
		})
	})

	t.Run("the controller keeps a TrustTarget as its ServiceAccount (the webhooks taken away above)", func(t *testing.T) {
		port, _ := controlplane.FreePort()
		p := startFor(t, parent, "controller", "--kubeconfig="+serviceAccountKubeconfig(t, cp, ns, "trustsync-controller"), "--namespace="+ns,
			"--health-bind-address=127.0.0.1:"+strconv.Itoa(port), "--leader-elect-retry-period=500ms")
		root := fixtures.CA("chart controller")
		if _, err := client.CertificatesV1().ClusterTrustBundles().Create(ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "chart-controller"},
			Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: fixtures.Bundle(root)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cp.CreateNamespace(ctx, "chart-targets", map[string]string{"trust": "chart"}); err != nil {
			t.Fatal(err)
		}
		tt := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "trustsync.io/v1alpha1", "kind": "TrustTarget", "metadata": map[string]any{"name": "chart"},
			"spec": map[string]any{"sources": []any{map[string]any{"name": "chart-controller", "path": "ca.crt"}},
				"target": map[string]any{"configMap": map[string]any{"name": "roots"}, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"trust": "chart"}}}}}}
		if _, err := dyn.Resource(schema.GroupVersionResource{Group: "trustsync.io", Version: "v1alpha1", Resource: "trusttargets"}).Create(ctx, tt, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the TrustTarget's ConfigMap written by the controller", p, func(ctx context.Context) (bool, error) {
			cm, err := client.CoreV1().ConfigMaps("chart-targets").Get(ctx, "roots", metav1.GetOptions{})
			return err == nil && cm.Data["ca.crt"] == string(root.CertPEM()), nil
		})
		if _, err := client.CoordinationV1().Leases(ns).Get(ctx, "trustsync-controller", metav1.GetOptions{}); err != nil {
			t.Errorf("the controller holds no Lease of its own: %v", err)
		}

		// A peer trust domain, imported as the controller's ServiceAccount: the API
		// server lets it attest for trustsync.io/federated, and for no other signer.
		peerCA := fixtures.CA("chart peer")
		id, _ := url.Parse(v1alpha1.BundleEndpointID("peer.example"))
		leaf := fixtures.MustNew(fixtures.Options{Leaf: true, URIs: []*url.URL{id}, Parent: peerCA})
		doc, _ := spiffebundle.FromX509Authorities(spiffeid.RequireTrustDomainFromString("peer.example"), []*x509.Certificate{peerCA.Cert}).Marshal()
		endpoint := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(doc) }))
		endpoint.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Cert.Raw}, PrivateKey: leaf.Key}}}
		endpoint.StartTLS()
		defer endpoint.Close()
		ftd := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "trustsync.io/v1alpha1", "kind": "FederatedTrustDomain", "metadata": map[string]any{"name": "chart-peer"},
			"spec": map[string]any{"trustDomain": "peer.example", "bundleEndpointURL": endpoint.URL + "/peer.example", "trustDomainBundle": fixtures.Bundle(peerCA),
				"bundleEndpointProfile": map[string]any{"type": "https_spiffe", "endpointSPIFFEID": id.String()}}}}
		if _, err := dyn.Resource(v1alpha1.FederatedTrustDomainResource).Create(ctx, ftd, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the peer's bundle imported by the controller", p, func(ctx context.Context) (bool, error) {
			b, err := client.CertificatesV1().ClusterTrustBundles().Get(ctx, v1alpha1.FederatedBundleName("peer.example"), metav1.GetOptions{})
			return err == nil && b.Spec.SignerName == v1alpha1.FederatedSignerName && b.Spec.TrustBundle == string(peerCA.CertPEM()), nil
		})
		for signer, want := range map[string]bool{v1alpha1.FederatedSignerName: true, "trustsync.io/workload": false, "example.com/any": false} {
			sar, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               "system:serviceaccount:" + ns + ":trustsync-controller",
				ResourceAttributes: &authorizationv1.ResourceAttributes{Group: "certificates.k8s.io", Resource: "signers", Name: signer, Verb: "attest"},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed != want {
				t.Errorf("the controller may attest for %s: %v, want %v", signer, sar.Status.Allowed, want)
			}
		}

		// Neither the signer's nor the controller's ServiceAccount may rewrite a bundle
		// it does not own (RBAC cannot say which), in either bundle API: the API
		// server's admission policy refuses, naming what each may write.
		rootBefore, err := client.CertificatesV1().ClusterTrustBundles().Get(ctx, "chart-root", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		impostor := fixtures.Bundle(fixtures.CA("impostor"))
		for _, sa := range []string{"trustsync-signer", "trustsync-controller"} {
			cfg, err := cp.ServiceAccountConfig(ctx, ns, sa)
			if err != nil {
				t.Fatal(err)
			}
			as := kubernetes.NewForConfigOrDie(cfg)
			patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"trustBundle": impostor}})
			_, err = as.CertificatesV1().ClusterTrustBundles().Patch(ctx, "chart-root", types.MergePatchType, patch, metav1.PatchOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may write only the ClusterTrustBundles of signers") || !strings.Contains(err.Error(), "chart-root is unsigned") {
				t.Errorf("%s rewrote the unsigned bundle chart-root, or was refused unclearly: %v", sa, err)
			}
			_, err = bundleapi.NewStore(dynamic.NewForConfigOrDie(cfg), bundle.Mirror).Create(ctx, &certificatesv1.ClusterTrustBundle{
				ObjectMeta: metav1.ObjectMeta{Name: "corp-roots-" + sa}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: impostor}}, metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may write only the ClusterTrustBundles of signers") {
				t.Errorf("%s created an unsigned mirror bundle, or was refused unclearly: %v", sa, err)
			}
		}
		if after, err := client.CertificatesV1().ClusterTrustBundles().Get(ctx, "chart-root", metav1.GetOptions{}); err != nil || after.Spec.TrustBundle != rootBefore.Spec.TrustBundle {
			t.Errorf("chart-root changed: %v", err)
		}

		// The imported bundle's label and owner are the controller's: even an admin
		// is refused, and told what to do instead.
		imported, err := client.CertificatesV1().ClusterTrustBundles().Get(ctx, v1alpha1.FederatedBundleName("peer.example"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name, says string
			edit       func(*certificatesv1.ClusterTrustBundle)
		}{
			{"the owner removed", "ownerReferences of " + imported.Name + " are kept by trustsync-controller", func(b *certificatesv1.ClusterTrustBundle) { b.OwnerReferences = nil }},
			{"the trust-domain label moved", "label trustsync.io/trust-domain of " + imported.Name, func(b *certificatesv1.ClusterTrustBundle) { b.Labels[v1alpha1.TrustDomainLabel] = "other.example" }},
		} {
			edited := imported.DeepCopy()
			tc.edit(edited)
			_, err := client.CertificatesV1().ClusterTrustBundles().Update(ctx, edited, metav1.UpdateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("an admin's edit, %s: %v; want Forbidden saying %q", tc.name, err, tc.says)
			}
		}
	})
}

// Every binary, built as make build and the image build them, answers --version (the
// plugin: version --client) with the build's version (hack/version.sh: VERSION, and
// between releases what git describe adds); the chart's version and appVersion say
// VERSION, and the chart in the tree renders the build's as its default tag.
func TestChart_EveryBinaryAndTheChartAgreeOnTheVersion(t *testing.T) {
	raw, err := os.ReadFile("../../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	released := strings.TrimSpace(string(raw))
	chart := string(helm(t, "show", "chart", "charts/trustsync"))
	if !strings.Contains(chart, "\nversion: "+released+"\n") || !strings.Contains(chart, "appVersion: "+released) {
		t.Errorf("the chart is not version %s:\n%s", released, chart)
	}
	want, err := controlplane.BuildVersion()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(want, released) {
		t.Errorf("the build's version %q does not start with VERSION %s", want, released)
	}
	for _, name := range []string{"webhook", "sidecar", "signer", "controller", "agent", "kubectl-trustsync"} {
		bin, err := controlplane.BuildBinary(name)
		if err != nil {
			t.Fatal(err)
		}
		args, prog := []string{"--version"}, "trustsync-"+name
		if name == "kubectl-trustsync" {
			args, prog = []string{"version", "--client"}, name
		}
		out, err := exec.Command(bin, args...).Output()
		first, rest, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		if err != nil || first != prog+" "+want {
			t.Errorf("%s %v says %q (%v); want %q", prog, args, out, err, prog+" "+want)
		}
		if name != "kubectl-trustsync" && rest != "FIPS 140-3 mode: off" {
			t.Errorf("%s --version says %q of FIPS; want %q", prog, rest, "FIPS 140-3 mode: off")
		}
	}
}

// Built with Go's FIPS 140-3 module (make build FIPS=1, the -fips images), every
// component runs in FIPS mode and says so, with the module, in --version and in
// trustsync_build_info.
func TestChart_AFIPSBuildSaysItRunsInFIPSMode(t *testing.T) {
	for _, name := range []string{"webhook", "sidecar", "signer", "controller", "agent"} {
		bin, err := controlplane.BuildBinary(name + "-fips")
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "--version").Output()
		if want := "FIPS 140-3 mode: on (Go Cryptographic Module " + controlplane.FIPSModule; err != nil || !strings.Contains(string(out), want) {
			t.Errorf("trustsync-%s-fips --version says %q (%v); want %q", name, out, err, want)
		}
	}
	bin, err := controlplane.BuildBinary("controller-fips")
	if err != nil {
		t.Fatal(err)
	}
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// The health server serves whether or not the controller reaches an API server,
	// and this test gives it none: /metrics is all it asks.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := controlplane.WriteKubeconfig(kubeconfig, &rest.Config{Host: "https://127.0.0.1:1", BearerToken: "none"}); err != nil {
		t.Fatal(err)
	}
	p, err := controlplane.StartProcess("trustsync-controller-fips", bin, []string{"--kubeconfig=" + kubeconfig, "--namespace=trustsync-system", "--leader-elect=false", "--health-bind-address=127.0.0.1:" + strconv.Itoa(port)}, filepath.Join(t.TempDir(), "controller.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(5 * time.Second)
	p.HealthAddr = "127.0.0.1:" + strconv.Itoa(port)
	poll.Eventually(t, 30*time.Second, "trustsync_build_info with fips on", func() (bool, string) {
		m, err := p.Metrics()
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(m, `trustsync_build_info{fips="on",fips_module="`+controlplane.FIPSModule), m
	})
}

// The project's helm is stamped with the Kubernetes its client knows, as helm's own
// release build is: `helm template` and `helm lint` work without --kube-version (an
// unstamped helm assumes 1.20, which the chart's kubeVersion refuses).
func TestChart_TheProjectsHelmRendersWithoutAKubeVersion(t *testing.T) {
	bin, err := controlplane.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"template", "trustsync", "../../../charts/trustsync"}, {"lint", "../../../charts/trustsync"}} {
		if out, err := exec.Command(filepath.Join(bin, "helm"), args...).CombinedOutput(); err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// The bundles NOTES.txt tells the user to look at are the kinds the cluster serves:
// its `kubectl get clustertrustbundles...` runs as printed on a cluster without the
// native bundle API (where naming the native kind would fail) and on one with it,
// which it then names too. The notes are rendered by the API server's own discovery
// (helm upgrade --install --dry-run=server), as an install or upgrade prints them.
func TestChart_TheNotesListTheBundleKindsTheClusterServes(t *testing.T) {
	for _, native := range []bool{false, true} {
		t.Run(fmt.Sprintf("native=%v", native), func(t *testing.T) {
			cp := planes.Get(t, native)
			if err := cp.InstallMirrorCRD(context.Background()); err != nil {
				t.Fatal(err)
			}
			kubeconfig := adminKubeconfig(t, cp)
			// The suite's release where another test installed it (a second release
			// would collide on the cluster-scoped objects), a first one elsewhere.
			// The mirror CRD was applied apart, as crds.enabled=false expects.
			out := string(helm(t, "upgrade", "--install", release, "charts/trustsync", "--namespace", ns, "--dry-run=server", "--set", "crds.enabled=false", "--kubeconfig", kubeconfig))
			var get []string
			for _, line := range strings.Split(out, "\n") {
				if f := strings.Fields(line); len(f) == 3 && f[0] == "kubectl" && f[1] == "get" && strings.HasPrefix(f[2], "clustertrustbundles") {
					get = f
				}
			}
			if get == nil {
				t.Fatalf("the notes name no bundles to look at:\n%s", out)
			}
			if names := strings.Contains(get[2], "clustertrustbundles.certificates.k8s.io"); names != native {
				t.Errorf("the notes' %q names the native kind: %v; the cluster serves it: %v", strings.Join(get, " "), names, native)
			}
			bin, err := controlplane.BinDir()
			if err != nil {
				t.Fatal(err)
			}
			if b, err := exec.Command(filepath.Join(bin, "kubectl"), append(get[1:], "--kubeconfig", kubeconfig)...).CombinedOutput(); err != nil {
				t.Errorf("the notes' %q fails as printed: %v\n%s", strings.Join(get, " "), err, b)
			}
		})
	}
}

// A second release in the same cluster is refused before anything is created, naming
// the release that is installed and what to do; the installed release itself still
// upgrades. Two releases would inject every pod twice, sign each signer's requests
// twice and fight over the CSIDriver csi.trustsync.io.
func TestChart_ASecondReleaseIsRefusedNamingTheFirst(t *testing.T) {
	cp := planes.Get(t, true)
	if err := cp.InstallMirrorCRD(context.Background()); err != nil {
		t.Fatal(err)
	}
	kubeconfig := adminKubeconfig(t, cp)
	bin, err := controlplane.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	helmOn := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(bin, "helm"), append(args, "--kubeconfig", kubeconfig)...)
		cmd.Dir, _ = filepath.Abs("../../..")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// The suite's release, where an earlier test installed it; else installed here.
	if _, err := helmOn("status", release, "-n", ns); err != nil {
		if out, err := helmOn("install", release, "charts/trustsync", "-n", ns, "--create-namespace"); err != nil {
			t.Fatalf("helm install: %v\n%s", err, out)
		}
	}
	out, err := helmOn("install", "second", "charts/trustsync", "-n", "second-system", "--create-namespace", "--dry-run=server")
	// Which cluster-wide object names the release depends on what the installed
	// release enabled: the webhook configurations, or the CSIDriver.
	want := regexp.MustCompile(`trustsync is already installed in this cluster: (MutatingWebhookConfiguration trustsync|ValidatingWebhookConfiguration trustsync|CSIDriver csi.trustsync.io) belongs to release trustsync in namespace trustsync-system: upgrade that release \(helm upgrade trustsync \.\.\. -n trustsync-system\), or uninstall it first`)
	if err == nil || !want.MatchString(out) {
		t.Errorf("a second release: %v\n%s\nwant it refused saying %q", err, out, want)
	}
	if out, err := helmOn("upgrade", release, "charts/trustsync", "-n", ns, "--dry-run=server"); err != nil {
		t.Errorf("the installed release no longer upgrades: %v\n%s", err, out)
	}
}
