// Package chart tests the Helm chart: lint, rendering with default and non-default
// values, and a real `helm install` into a control plane of its own (its fail-closed
// webhooks have no running backend there, so no other test shares it), after which each
// component runs with exactly the chart's ServiceAccount and roles.
package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
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
	t.Run("bad values are refused by the schema", func(t *testing.T) {
		bin, _ := controlplane.BinDir()
		cmd := exec.Command(filepath.Join(bin, "helm"), "template", release, "charts/trustsync", "--set", "webhook.defaultSidecarMode=sidecar")
		cmd.Dir, _ = filepath.Abs("../../..")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "/webhook/defaultSidecarMode") {
			t.Errorf("err = %v, output %s", err, out)
		}
	})
}

// toString is an object's JSON, for checking what it contains.
func toString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
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

func start(t *testing.T, name string, args ...string) *controlplane.Process {
	t.Helper()
	bin, err := controlplane.BuildBinary(name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := controlplane.StartProcess("trustsync-"+name, bin, args, filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.Tail())
		}
	})
	return p
}

func eventually(t *testing.T, what string, p *controlplane.Process, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, cond); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, p.Tail())
	}
}

func TestChart_InstallsAndEachComponentWorksWithTheChartsRBAC(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	kubeconfig := filepath.Join(t.TempDir(), "admin")
	if err := controlplane.WriteKubeconfig(kubeconfig, cp.AdminConfig()); err != nil {
		t.Fatal(err)
	}
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
	if _, err := bundle.NewStore(dyn, bundle.Mirror).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the mirror CRD from crds/ is not served: %v", err)
	}
	v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, release, metav1.GetOptions{})
	if err != nil || v.Webhooks[0].ClientConfig.Service == nil || v.Webhooks[0].ClientConfig.Service.Name != "trustsync-webhook" || v.Webhooks[0].ClientConfig.Service.Namespace != ns {
		t.Fatalf("the webhook configuration does not point at the Service: %+v, %v", v, err)
	}

	t.Run("the webhook manages its TLS as its ServiceAccount", func(t *testing.T) {
		port, _ := controlplane.FreePort()
		policy := filepath.Join(t.TempDir(), "policy.yaml")
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "trustsync-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(policy, []byte(cm.Data["policy.yaml"]), 0o600)
		p := start(t, "webhook", "--kubeconfig="+serviceAccountKubeconfig(t, cp, ns, "trustsync-webhook"), "--namespace="+ns,
			"--self-managed-tls", "--tls-secret-name=trustsync-webhook-tls", "--service-name=trustsync-webhook", "--webhook-configuration-name=trustsync",
			"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port), "--policy="+policy)
		eventually(t, "the webhook set its CA in both configurations", p, func(ctx context.Context) (bool, error) {
			secret, err := client.CoreV1().Secrets(ns).Get(ctx, "trustsync-webhook-tls", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			v, _ := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, release, metav1.GetOptions{})
			m, _ := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, release, metav1.GetOptions{})
			return bytes.Equal(v.Webhooks[0].ClientConfig.CABundle, secret.Data["ca.crt"]) && bytes.Equal(m.Webhooks[0].ClientConfig.CABundle, secret.Data["ca.crt"]), nil
		})
	})

	t.Run("the signer creates its CA, takes its Lease and publishes as its ServiceAccount", func(t *testing.T) {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "trustsync-policy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		policy := filepath.Join(t.TempDir(), "policy.yaml")
		_ = os.WriteFile(policy, []byte(cm.Data["policy.yaml"]), 0o600)
		port, _ := controlplane.FreePort()
		p := start(t, "signer", "--kubeconfig="+serviceAccountKubeconfig(t, cp, ns, "trustsync-signer"), "--namespace="+ns, "--policy="+policy,
			"--health-bind-address=127.0.0.1:"+strconv.Itoa(port), "--leader-elect-retry-period=500ms")
		eventually(t, "the signer published its live bundle", p, func(ctx context.Context) (bool, error) {
			_, err := bundle.NewStore(dyn, bundle.NativeV1).Get(ctx, "trustsync.io:workload:live")
			return err == nil, nil
		})
		if _, err := client.CoreV1().Secrets(ns).Get(ctx, "trustsync-ca-trustsync.io-workload", metav1.GetOptions{}); err != nil {
			t.Errorf("no CA Secret: %v", err)
		}
		if _, err := client.CoordinationV1().Leases(ns).Get(ctx, "trustsync-signer", metav1.GetOptions{}); err != nil {
			t.Errorf("no Lease: %v", err)
		}
	})

	t.Run("a sidecar reads bundles as any ServiceAccount, through the chart's sidecar role", func(t *testing.T) {
		if err := cp.CreateNamespace(ctx, "apps", nil); err != nil {
			t.Fatal(err)
		}
		a := fixtures.CA("chart test")
		if _, err := bundle.NewStore(dyn, bundle.NativeV1).Create(ctx, &certificatesv1.ClusterTrustBundle{
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
		s := cp.StartSidecar(t, "apps", "anyone", pod, "run", `--projections=[{"name": "chart-root", "path": "ca.pem"}]`)
		p := bundle.NewPool()
		p.AddDER(a.Cert.Raw)
		s.WaitFor(t, "ca.pem", p.PEM())
	})
}
