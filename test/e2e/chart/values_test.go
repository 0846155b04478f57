package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// workloads are the chart's four workloads, by component, as typed pod templates.
func workloads(t *testing.T, objs []*unstructured.Unstructured) map[string]corev1.PodTemplateSpec {
	t.Helper()
	out := map[string]corev1.PodTemplateSpec{}
	for _, o := range objs {
		var tmpl corev1.PodTemplateSpec
		switch o.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatal(err)
			}
			tmpl = d.Spec.Template
		case "DaemonSet":
			var d appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatal(err)
			}
			tmpl = d.Spec.Template
		default:
			continue
		}
		out[o.GetLabels()["app.kubernetes.io/component"]] = tmpl
	}
	if len(out) != 4 {
		t.Fatalf("rendered workloads %v, want webhook, signer, controller and agent", slices.Sorted(func(yield func(string) bool) {
			for k := range out {
				if !yield(k) {
					return
				}
			}
		}))
	}
	return out
}

// What a platform team sets for production reaches every workload it is meant for.
func TestChart_ProductionSettingsReachEveryWorkload(t *testing.T) {
	values := filepath.Join(t.TempDir(), "production.yaml")
	digest := "sha256:" + strings.Repeat("ab", 32)
	if err := os.WriteFile(values, []byte(`
image: {digest: `+digest+`}
imagePullSecrets: [{name: registry-credentials}]
logLevel: 2
webhook:
  replicas: 1
  hostNetwork: true
  port: 10260
  sidecarImagePullSecrets: [app-registry]
  priorityClassName: system-cluster-critical
  extraArgs: [--kube-api-qps=50]
  nodeSelector: {pool: system}
  tolerations: [{key: dedicated, operator: Equal, value: system, effect: NoSchedule}]
signer:
  podDisruptionBudget: {enabled: true}
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [secure]}]}]}}}
controller:
  resources: {requests: {cpu: 10m, memory: 32Mi}}
agent:
  extraArgs: [--observe-interval=1s]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := objects(t, helm(t, "template", release, "charts/trustsync", "-n", ns, "-f", values))
	w := workloads(t, objs)
	for component, tmpl := range w {
		spec := tmpl.Spec
		if !slices.Contains(spec.ImagePullSecrets, corev1.LocalObjectReference{Name: "registry-credentials"}) {
			t.Errorf("%s: imagePullSecrets %v lack the chart's", component, spec.ImagePullSecrets)
		}
		if spec.NodeSelector["kubernetes.io/os"] != "linux" {
			t.Errorf("%s: nodeSelector %v does not keep it to Linux nodes", component, spec.NodeSelector)
		}
		c := spec.Containers[0]
		if c.Image != "ghcr.io/trustsync/trustsync@"+digest {
			t.Errorf("%s: image %s, want it pinned by digest", component, c.Image)
		}
		if !slices.Contains(c.Args, "--v=2") {
			t.Errorf("%s: args %v lack the log level", component, c.Args)
		}
	}
	webhook := w["webhook"].Spec
	if !webhook.HostNetwork || webhook.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("webhook: hostNetwork %v, dnsPolicy %q", webhook.HostNetwork, webhook.DNSPolicy)
	}
	if webhook.PriorityClassName != "system-cluster-critical" || webhook.NodeSelector["pool"] != "system" || len(webhook.Tolerations) != 1 {
		t.Errorf("webhook: placement not applied: %q %v %v", webhook.PriorityClassName, webhook.NodeSelector, webhook.Tolerations)
	}
	if args := webhook.Containers[0].Args; args[len(args)-1] != "--kube-api-qps=50" || !slices.Contains(args, "--sidecar-image-pull-secrets=app-registry") ||
		!slices.Contains(args, "--sidecar-image=ghcr.io/trustsync/trustsync@"+digest) {
		t.Errorf("webhook args %v: want the extra flag last, the sidecars' pull Secret and the sidecar image by digest", args)
	}
	if a := w["signer"].Spec.Affinity; a == nil || a.NodeAffinity == nil || a.PodAntiAffinity != nil {
		t.Errorf("signer: affinity %+v, want the user's in place of the default spread", a)
	}
	if r := w["controller"].Spec.Containers[0].Resources; r.Requests.Cpu().String() != "10m" {
		t.Errorf("controller: resources %v", r)
	}
	if args := w["agent"].Spec.Containers[0].Args; args[len(args)-1] != "--observe-interval=1s" {
		t.Errorf("agent args %v: want the extra flag last", args)
	}
	var pdbs []string
	for _, o := range objs {
		if o.GetKind() == "PodDisruptionBudget" {
			pdbs = append(pdbs, o.GetName())
		}
	}
	if !slices.Equal(pdbs, []string{"trustsync-signer"}) {
		t.Errorf("PodDisruptionBudgets %v: want the signer's alone, as enabled", pdbs)
	}

	// The defaults: no PDB (a one-node cluster's drain would block on one), replicas
	// spread over nodes.
	objs = objects(t, helm(t, "template", release, "charts/trustsync", "-n", ns))
	for _, o := range objs {
		if o.GetKind() == "PodDisruptionBudget" {
			t.Errorf("a default install renders PodDisruptionBudget %s", o.GetName())
		}
	}
	w = workloads(t, objs)
	for _, c := range []string{"webhook", "signer"} {
		if a := w[c].Spec.Affinity; a == nil || a.PodAntiAffinity == nil {
			t.Errorf("%s: replicas not spread over nodes by default", c)
		}
	}
}

// fips: true runs every component, and the injected sidecars, from the FIPS image (the
// tag and -fips) with GODEBUG=fips140=on; without it nothing says FIPS.
func TestChart_FIPSRunsEveryComponentFromTheFIPSImageInFIPSMode(t *testing.T) {
	for _, tc := range []struct {
		set, image string
		fips       bool
	}{
		{"fips=true", "ghcr.io/trustsync/trustsync:v" + chartVersion(t) + "-fips", true},
		{"fips=true,image.tag=v9.9.9", "ghcr.io/trustsync/trustsync:v9.9.9-fips", true},
		{"fips=false", "ghcr.io/trustsync/trustsync:v" + chartVersion(t), false},
	} {
		t.Run(tc.set, func(t *testing.T) {
			w := workloads(t, objects(t, helm(t, "template", release, "charts/trustsync", "-n", ns, "--set", tc.set)))
			for component, tmpl := range w {
				c := tmpl.Spec.Containers[0]
				if c.Image != tc.image {
					t.Errorf("%s: image %s, want %s", component, c.Image, tc.image)
				}
				godebug := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "GODEBUG" && e.Value == "fips140=on" })
				if godebug != tc.fips {
					t.Errorf("%s: GODEBUG=fips140=on set: %v, want %v", component, godebug, tc.fips)
				}
			}
			if args := w["webhook"].Spec.Containers[0].Args; !slices.Contains(args, "--sidecar-image="+tc.image) {
				t.Errorf("webhook args %v: want the sidecars from %s", args, tc.image)
			}
		})
	}
}

// signer.pkcs11 runs the signer from the PKCS#11 signer's image (named after the image,
// the same tag, -fips in FIPS mode, or its own digest), with the vendor's module
// mounted as given and the PIN in the signer's container alone; the other
// components keep the static image. Off, nothing of it renders.
func TestChart_PKCS11RunsTheSignerFromItsImageWithTheModuleMounted(t *testing.T) {
	v := chartVersion(t)
	module := `signer.pkcs11.volumes=[{"name":"hsm","hostPath":{"path":"/opt/hsm"}}]`
	mount := `signer.pkcs11.volumeMounts=[{"name":"hsm","mountPath":"/opt/hsm","readOnly":true}]`
	env := `signer.pkcs11.env=[{"name":"ChrystokiConfigurationPath","value":"/opt/hsm/etc"}]`
	digest := "sha256:" + strings.Repeat("b", 64)
	for _, tc := range []struct {
		name  string
		set   []string
		image string
		pin   bool
	}{
		{"enabled", []string{"signer.pkcs11.enabled=true"}, "ghcr.io/trustsync/trustsync-signer-pkcs11:v" + v, false},
		{"enabled in FIPS mode from a mirror", []string{"signer.pkcs11.enabled=true,fips=true,image.registry=mirror.example", "signer.pkcs11.pinSecret=hsm-pin"},
			"mirror.example/ghcr.io/trustsync/trustsync-signer-pkcs11:v" + v + "-fips", true},
		{"pinned by digest", []string{"signer.pkcs11.enabled=true,image.digest=sha256:" + strings.Repeat("a", 64) + ",signer.pkcs11.digest=" + digest},
			"ghcr.io/trustsync/trustsync-signer-pkcs11@" + digest, false},
		{"off", []string{"signer.pkcs11.enabled=false,signer.pkcs11.pinSecret=hsm-pin"}, "ghcr.io/trustsync/trustsync:v" + v, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", release, "charts/trustsync", "-n", ns, "--set-json", module, "--set-json", mount, "--set-json", env}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			w := workloads(t, objects(t, helm(t, args...)))
			signer := w["signer"].Spec
			c := signer.Containers[0]
			if c.Image != tc.image {
				t.Errorf("the signer runs %s, want %s", c.Image, tc.image)
			}
			if other := w["webhook"].Spec.Containers[0].Image; strings.Contains(other, "pkcs11") {
				t.Errorf("the webhook runs %s", other)
			}
			pkcs11 := tc.name != "off"
			if got := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "hsm" && m.MountPath == "/opt/hsm" && m.ReadOnly }) &&
				slices.ContainsFunc(signer.Volumes, func(v corev1.Volume) bool { return v.HostPath != nil && v.HostPath.Path == "/opt/hsm" }) &&
				slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "ChrystokiConfigurationPath" }); got != pkcs11 {
				t.Errorf("the module's volume, mount and environment rendered: %v, want %v", got, pkcs11)
			}
			i := slices.IndexFunc(signer.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "hsm-pin" })
			if (i >= 0) != tc.pin {
				t.Fatalf("the PIN Secret mounted: %v, want %v", i >= 0, tc.pin)
			}
			if tc.pin {
				sec := signer.Volumes[i].Secret
				// No fsGroup: a platform assigning UIDs and groups (OpenShift) refuses one.
				if signer.SecurityContext.FSGroup != nil || len(sec.Items) != 1 || sec.Items[0].Key != "pin" || sec.Items[0].Path != "pin" {
					t.Errorf("the PIN's volume %+v with fsGroup %v: want key pin as pin, no fsGroup", sec, signer.SecurityContext.FSGroup)
				}
				if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
					return m.Name == signer.Volumes[i].Name && m.MountPath == "/var/run/secrets/trustsync.io/pkcs11"
				}) {
					t.Errorf("the PIN is not at /var/run/secrets/trustsync.io/pkcs11/pin: %v", c.VolumeMounts)
				}
			}
		})
	}
}

// The agent's namespace gets a quota admitting its critical priority class (GKE admits
// such pods outside kube-system under one only), scoped to that class alone; a class
// no cluster limits, or criticalPodQuota off, renders none.
func TestChart_TheAgentsCriticalClassGetsAQuotaInItsNamespace(t *testing.T) {
	for _, tc := range []struct {
		set, class string
	}{
		{"agent.namespace=trustsync-agent", "system-node-critical"},
		{"agent.priorityClassName=system-cluster-critical", "system-cluster-critical"},
		{"agent.priorityClassName=high", ""},
		{"agent.criticalPodQuota=false", ""},
	} {
		t.Run(tc.set, func(t *testing.T) {
			var quotas []*unstructured.Unstructured
			for _, o := range objects(t, helm(t, "template", release, "charts/trustsync", "-n", ns, "--set", tc.set)) {
				if o.GetKind() == "ResourceQuota" {
					quotas = append(quotas, o)
				}
			}
			if tc.class == "" {
				if len(quotas) != 0 {
					t.Errorf("rendered %d ResourceQuotas, want none", len(quotas))
				}
				return
			}
			if len(quotas) != 1 {
				t.Fatalf("rendered %d ResourceQuotas, want one", len(quotas))
			}
			q := quotas[0]
			wantNS := ns
			if strings.HasPrefix(tc.set, "agent.namespace=") {
				wantNS = strings.TrimPrefix(tc.set, "agent.namespace=")
			}
			exprs, _, _ := unstructured.NestedSlice(q.Object, "spec", "scopeSelector", "matchExpressions")
			values, _, _ := unstructured.NestedStringSlice(exprs[0].(map[string]any), "values")
			if q.GetNamespace() != wantNS || len(exprs) != 1 || strings.Join(values, ",") != tc.class {
				t.Errorf("quota in %q scoped to %v, want in %q scoped to %s alone", q.GetNamespace(), exprs, wantNS, tc.class)
			}
		})
	}
}

// Each component takes its own environment, pod and container security contexts and
// ServiceAccount: an existing ServiceAccount named instead of the chart's is what its
// workload runs as and what every binding and admission policy names.
func TestChart_EachComponentTakesItsEnvSecurityContextsAndServiceAccount(t *testing.T) {
	values := filepath.Join(t.TempDir(), "conventions.yaml")
	var b strings.Builder
	for _, c := range []string{"webhook", "signer", "controller", "agent"} {
		fmt.Fprintf(&b, `%s:
  extraEnv: [{name: HTTPS_PROXY, value: "http://proxy.example:3128"}]
  podSecurityContext: {fsGroupChangePolicy: OnRootMismatch}
  securityContext: {runAsUser: null, runAsGroup: null, seLinuxOptions: {level: "s0:c26,c5"}}
  serviceAccount: {create: false, name: platform-%s}
`, c, c)
	}
	if err := os.WriteFile(values, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := objects(t, helm(t, "template", release, "charts/trustsync", "-n", ns, "-f", values))
	for component, tmpl := range workloads(t, objs) {
		spec := tmpl.Spec
		c := spec.Containers[0]
		if !hasEnvVar(c.Env, "HTTPS_PROXY") {
			t.Errorf("%s: env %v lacks extraEnv", component, c.Env)
		}
		// Helm merges a value into the defaults; null takes a default key out.
		if spec.SecurityContext == nil || spec.SecurityContext.FSGroupChangePolicy == nil {
			t.Errorf("%s: pod securityContext %+v lacks the value's", component, spec.SecurityContext)
		}
		if sc := c.SecurityContext; sc == nil || sc.RunAsUser != nil || sc.RunAsGroup != nil || sc.SELinuxOptions == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: container securityContext %+v, want the defaults without runAsUser and runAsGroup, with the value's seLinuxOptions", component, sc)
		}
		if spec.ServiceAccountName != "platform-"+component {
			t.Errorf("%s runs as %q, want platform-%s", component, spec.ServiceAccountName, component)
		}
	}
	for _, o := range objs {
		// helm test's own ServiceAccount is a hook's, made for the test alone.
		if o.GetKind() == "ServiceAccount" && o.GetAnnotations()["helm.sh/hook"] != "test" {
			t.Errorf("ServiceAccount %s rendered with serviceAccount.create: false", o.GetName())
		}
		text := toString(o.Object)
		for _, c := range []string{"webhook", "signer", "controller", "agent"} {
			if strings.Contains(text, `"kind":"ServiceAccount","name":"trustsync-`+c+`"`) || strings.Contains(text, "serviceaccount:"+ns+":trustsync-"+c) {
				t.Errorf("%s %s still names the chart's ServiceAccount trustsync-%s", o.GetKind(), o.GetName(), c)
			}
		}
	}
}

func hasEnvVar(env []corev1.EnvVar, name string) bool {
	return slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })
}

// chartVersion is the version the chart in the tree renders by default: the build's
// that make build wrote (files/build-version), else its appVersion (VERSION).
func chartVersion(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../../../charts/trustsync/files/build-version")
	if os.IsNotExist(err) {
		raw, err = os.ReadFile("../../../VERSION")
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(raw))
}

// The schema refuses any key it does not know, wherever it is: a typo must fail the
// install, not install a webhook and a signer that crash-loop on the policy.
func TestChart_SchemaRefusesUnknownKeysEverywhere(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"webhook.replicsa=2", "replicsa"},
		{"policy.signers[0].signerName=example.com/x", ""},
		{"policy.signers[0].trustDomian=example.org", "trustDomian"},
		{"policy.signers[0].approval.dnsName={a}", "dnsName"},
		{"policy.bundles.denyExpird=true", "denyExpird"},
		{"agent.reports.intervall=1s", "intervall"},
		{"prometheus.servicemonitor.enabled=true", "servicemonitor"},
		{"imagePullSecrets[0].nme=x", "nme"},
		{"webhook.podDisruptionBudget.maxUnavailable=1", "maxUnavailable"},
		{"signer.resources.limit.memory=1Gi", "limit"},
		{"certManager.issuerRef.nam=x", "nam"},
		{"image.digest=latest", "digest"},
		{"logLevel=-1", "logLevel"},
		{"webhook.extraArgs={kube-api-qps=5}", "extraArgs"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			out, err := renderSet(t, tc.set)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %s", out)
			case tc.want != "" && err == nil:
				t.Errorf("--set %s rendered; want it refused", tc.set)
			case tc.want != "" && !strings.Contains(out, tc.want):
				t.Errorf("the refusal does not name %q:\n%s", tc.want, out)
			}
		})
	}
}

// Values that cannot work are refused at install, saying what to set instead.
func TestChart_RefusesValuesThatCannotWorkSayingWhatToSet(t *testing.T) {
	for _, tc := range []struct{ name, set, want string }{
		{"the webhook on the node's network at the kubelet's port", "webhook.hostNetwork=true", "port 10250 (webhook.port's default) is the kubelet's: set webhook.port"},
		{"an agent namespace that is no namespace name", "agent.namespace=Trust_Agent", "/agent/namespace"},
		{"authorized Secret names where no Secret is allowed", "targets.authorizedSecrets={trust-roots}", "targets.authorizedSecrets narrows the Secrets targets.secrets allows: set targets.secrets: true too"},
		{"an authorized Secret name no Secret can have", "targets.secrets=true,targets.authorizedSecrets={Trust_Roots}", "/targets/authorizedSecrets/0"},
		{"the sidecars' Event bindings without the controller that keeps them", "targets.enabled=false", "sidecarRBAC.events needs trustsync-controller (targets.enabled), which binds the sidecars' Event role in each namespace: set targets.enabled: true, or sidecarRBAC.events: false"},
		{"a CA key in a PKCS#11 token without the PKCS#11 signer", "policy.signers[0].signerName=trustsync.io/workload,policy.signers[0].keyRef=pkcs11:token=ca;object=ca?module-path=/opt/hsm/lib.so&pin-source=/pin",
			"policy.signers[0] (trustsync.io/workload) keeps its CA key in a PKCS#11 token (keyRef pkcs11:token=ca;object=ca?module-path=/opt/hsm/lib.so&pin-source=/pin), which only the PKCS#11 signer can load: set signer.pkcs11.enabled"},
		{"images pinned by digest but not the PKCS#11 signer's", "signer.pkcs11.enabled=true,image.digest=sha256:" + strings.Repeat("a", 64), "image.digest pins the images, but not the PKCS#11 signer's: give its digest in signer.pkcs11.digest"},
		{"a PIN Secret that is no Secret name", "signer.pkcs11.enabled=true,signer.pkcs11.pinSecret=HSM_PIN", "/signer/pkcs11/pinSecret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := renderSet(t, tc.set)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("--set %s: %v\n%s\nwant it refused saying %q", tc.set, err, out, tc.want)
			}
		})
	}
}

// valuesRevision, which refuses `helm upgrade --reuse-values` from values of another
// shape, changes whenever values.yaml's keys do: testdata/values-keys.txt holds the
// keys of the current revision. A key added, removed or renamed without a new
// revision fails here (set TRUSTSYNC_UPDATE_GOLDEN=1 to rewrite the file once the
// revision is bumped in values.yaml and templates/checks/values-revision.yaml).
func TestChart_ValuesRevisionChangesWithValuesKeys(t *testing.T) {
	raw, err := os.ReadFile("../../../charts/trustsync/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	tpl, err := os.ReadFile("../../../charts/trustsync/templates/checks/values-revision.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`\$want := (\d+)`).FindSubmatch(tpl)
	if want == nil || fmt.Sprint(values["valuesRevision"]) != string(want[1]) {
		t.Fatalf("values.yaml says valuesRevision %v, templates/checks/values-revision.yaml wants %s", values["valuesRevision"], want)
	}
	var keys []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			keys = append(keys, prefix+k)
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+k+".", sub)
			}
		}
	}
	walk("", values)
	sort.Strings(keys)
	got := fmt.Sprintf("valuesRevision %s\n%s\n", want[1], strings.Join(keys, "\n"))
	golden := "testdata/values-keys.txt"
	if os.Getenv("TRUSTSYNC_UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	recorded, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(recorded) != got {
		first, _, _ := strings.Cut(string(recorded), "\n")
		if first == "valuesRevision "+string(want[1]) {
			t.Fatalf("values.yaml's keys changed under %s: bump valuesRevision in values.yaml and templates/checks/values-revision.yaml (an upgrade with --reuse-values from the previous shape must be refused), then rewrite %s with TRUSTSYNC_UPDATE_GOLDEN=1", first, golden)
		}
		t.Fatalf("%s does not hold values.yaml's keys for valuesRevision %s: rewrite it with TRUSTSYNC_UPDATE_GOLDEN=1", golden, want[1])
	}
}

// Artifact Hub's annotations say what the chart installs: the image the chart runs by
// default, and every CRD of crds/ by kind, version and name.
func TestChart_ArtifactHubAnnotationsNameTheImageAndEveryCRD(t *testing.T) {
	raw, err := os.ReadFile("../../../charts/trustsync/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion  string            `json:"appVersion"`
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(raw, &chart); err != nil {
		t.Fatal(err)
	}
	var images []struct{ Name, Image string }
	if err := yaml.Unmarshal([]byte(chart.Annotations["artifacthub.io/images"]), &images); err != nil || len(images) != 2 {
		t.Fatalf("artifacthub.io/images: %v %v", images, err)
	}
	rendered := string(helm(t, "template", release, "charts/trustsync", "-n", ns))
	// Artifact Hub lists a release's images; the chart in the tree renders the build's.
	if want := "ghcr.io/trustsync/trustsync:v" + chart.AppVersion; images[0].Image != want || !strings.Contains(rendered, "image: ghcr.io/trustsync/trustsync:v"+chartVersion(t)+"\n") {
		t.Errorf("artifacthub.io/images names %s; the chart runs %s as a release", images[0].Image, want)
	}
	pkcs11 := string(helm(t, "template", release, "charts/trustsync", "-n", ns, "--set", "signer.pkcs11.enabled=true"))
	if want := "ghcr.io/trustsync/trustsync-signer-pkcs11:v" + chart.AppVersion; images[1].Image != want || !strings.Contains(pkcs11, "image: ghcr.io/trustsync/trustsync-signer-pkcs11:v"+chartVersion(t)+"\n") {
		t.Errorf("artifacthub.io/images names %s; the chart runs %s with signer.pkcs11.enabled", images[1].Image, want)
	}
	// The chart's icon is the repository's.
	var meta struct{ Icon string }
	if err := yaml.Unmarshal(raw, &meta); err != nil {
		t.Fatal(err)
	}
	if file, ok := strings.CutPrefix(meta.Icon, "https://raw.githubusercontent.com/trustsync/trustsync/main/"); !ok {
		t.Errorf("icon %q is not a file of the repository", meta.Icon)
	} else if _, err := os.Stat("../../../" + file); err != nil {
		t.Errorf("icon %s: %v", meta.Icon, err)
	}
	var crds []struct{ Kind, Version, Name string }
	if err := yaml.Unmarshal([]byte(chart.Annotations["artifacthub.io/crds"]), &crds); err != nil {
		t.Fatal(err)
	}
	var listed, inChart []string
	for _, c := range crds {
		listed = append(listed, c.Name+" "+c.Kind+" "+c.Version)
	}
	files, err := filepath.Glob("../../../charts/trustsync/files/crds/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd struct {
			Metadata struct{ Name string }
			Spec     struct {
				Names    struct{ Kind string }
				Versions []struct{ Name string }
			}
		}
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatal(err)
		}
		inChart = append(inChart, crd.Metadata.Name+" "+crd.Spec.Names.Kind+" "+crd.Spec.Versions[0].Name)
	}
	sort.Strings(listed)
	sort.Strings(inChart)
	if !slices.Equal(listed, inChart) {
		t.Errorf("artifacthub.io/crds lists %v; crds/ holds %v", listed, inChart)
	}
}

// Every workload but the node agent passes Pod Security restricted, as install.md says
// (a release namespace kept restricted, the agent in a namespace of its own): the API
// server's own Pod Security admission judges each pod template, with the namespace
// enforcing restricted; the agent's is refused there, and admitted where privileged.
func TestChart_EveryWorkloadButTheAgentPassesPodSecurityRestricted(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	for name, level := range map[string]string{"psa-restricted": "restricted", "psa-privileged": "privileged"} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": level}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for component, tmpl := range workloads(t, objects(t, helm(t, "template", release, "charts/trustsync", "-n", ns))) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: component + "-"}, Spec: tmpl.Spec}
		// The ServiceAccount admission wants the pod's account to exist, as the chart
		// creates it in the release namespace.
		for _, namespace := range []string{"psa-restricted", "psa-privileged"} {
			if _, err := client.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tmpl.Spec.ServiceAccountName}},
				metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
		_, err := client.CoreV1().Pods("psa-restricted").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case component == "agent" && err == nil:
			t.Error("the agent's pod passes restricted; install.md says it needs privileged")
		case component == "agent":
			if _, err := client.CoreV1().Pods("psa-privileged").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Errorf("the agent's pod where privileged: %v", err)
			}
		case err != nil:
			t.Errorf("the %s's pod in a namespace enforcing restricted: %v", component, err)
		}
	}
}
