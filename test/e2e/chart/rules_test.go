package chart

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/trustsync/trustsync/agent"
	"github.com/trustsync/trustsync/controller"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/signer"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/webhook"
)

const rulesFile = "../../../charts/trustsync/files/prometheus-rules.yaml"

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(data, &rf); err != nil {
		t.Fatal(err)
	}
	return rf
}

// Every alert leads somewhere: its runbook_url is its own row of docs/operations.md,
// whose anchor exists there.
func TestChart_EveryAlertsRunbookIsItsRowInOperations(t *testing.T) {
	ops, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	const base = "https://github.com/trustsync/trustsync/blob/main/docs/operations.md#"
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			anchor := strings.ToLower(r.Alert)
			if got := r.Annotations["runbook_url"]; got != base+anchor {
				t.Errorf("alert %s has runbook_url %q, want %s%s", r.Alert, got, base, anchor)
			}
			if !strings.Contains(string(ops), `<a id="`+anchor+`"></a>`) {
				t.Errorf("docs/operations.md has no row anchored %q for alert %s", anchor, r.Alert)
			}
		}
	}
}

// Prometheus's own rule engine runs each alert over series shaped like what the
// binaries export (testdata/rules-test.yaml): it fires when it should, and stays
// quiet when things are healthy.
func TestChart_AlertRulesFireWhenTheyShouldAndOnlyThen(t *testing.T) {
	bin, err := controlplane.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "promtool"), "test", "rules", "rules-test.yaml")
	cmd.Dir = "testdata"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// Every alert has a test in which it fires, and every metric an alert reads is one a
// trustsync binary registers: a rule over a name nothing exports can never fire.
func TestChart_EveryAlertIsTestedAndReadsOnlyMetricsTheBinariesRegister(t *testing.T) {
	registered := registeredMetrics(t)
	data, err := os.ReadFile("testdata/rules-test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	metric := regexp.MustCompile(`\btrustsync_[a-z0-9_]+`)
	rf := readRules(t)
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			n++
			if !fires[r.Alert] {
				t.Errorf("alert %s has no test in which it fires", r.Alert)
			}
			for _, name := range metric.FindAllString(r.Expr, -1) {
				base := name
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if b, ok := strings.CutSuffix(name, suffix); ok && registered[b] {
						base = b
					}
				}
				if !registered[base] {
					t.Errorf("alert %s reads %s, which no trustsync binary registers", r.Alert, name)
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("read %d alerts from %s", n, rulesFile)
	}
}

// registeredMetrics is every metric name the binaries' metrics constructors register.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := describedNames{}
	webhook.NewMetrics(names)
	names.MustRegister(webhook.ServingCertificateCollector(nil))
	signer.NewMetrics(names)
	controller.NewMetrics(names)
	agent.NewMetrics().Register(names)
	if len(names) < 20 {
		t.Fatalf("only %d metrics registered: %v", len(names), names)
	}
	return names
}

// describedNames is a Registerer that keeps the name of each metric it is given.
type describedNames map[string]bool

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (n describedNames) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			n[m[1]] = true
		}
	}
	return nil
}

func (n describedNames) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = n.Register(c)
	}
}

func (n describedNames) Unregister(prometheus.Collector) bool { return false }

// The chart renders the rules file's groups as they are, leaving out the group of a
// component it does not install, and a ServiceMonitor (or PodMonitor) per installed
// component whose job label the alerts use.
func TestChart_RendersTheAlertsAndAServiceMonitorPerComponent(t *testing.T) {
	rf := readRules(t)
	var all []string
	for _, g := range rf.Groups {
		all = append(all, g.Name)
	}
	for _, tc := range []struct {
		name       string
		set        []string
		components []string
	}{
		{name: "everything installed", components: []string{"agent", "controller", "signer", "webhook"}},
		{name: "no signer, no agent", set: []string{"signer.enabled=false", "agent.enabled=false"}, components: []string{"controller", "webhook"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", release, "charts/trustsync", "-n", ns,
				"--set", "prometheus.serviceMonitor.enabled=true", "--set", "prometheus.prometheusRule.enabled=true",
				"--set", "prometheus.serviceMonitor.labels.release=kube-prometheus"}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			objs := objects(t, helm(t, args...))
			var monitored []string
			for _, o := range objs {
				if o.GetKind() != "ServiceMonitor" {
					continue
				}
				c := o.GetLabels()["app.kubernetes.io/component"]
				monitored = append(monitored, c)
				if o.GetLabels()["release"] != "kube-prometheus" {
					t.Errorf("ServiceMonitor %s lacks the labels Prometheus selects it by", o.GetName())
				}
				svc := find(objs, "Service", o.GetName()+"-metrics")
				if svc == nil || svc.GetLabels()["trustsync.io/metrics-job"] != "trustsync-"+c {
					t.Errorf("ServiceMonitor %s: no metrics Service giving job trustsync-%s", o.GetName(), c)
				}
			}
			slices.Sort(monitored)
			if !reflect.DeepEqual(monitored, tc.components) {
				t.Errorf("ServiceMonitors for %v, want %v", monitored, tc.components)
			}
			rule := find(objs, "PrometheusRule", "")
			if rule == nil {
				t.Fatal("no PrometheusRule rendered")
			}
			groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
			var got, want []string
			for _, g := range groups {
				got = append(got, g.(map[string]any)["name"].(string))
			}
			for _, g := range all {
				if slices.Contains(tc.components, strings.TrimPrefix(g, "trustsync-")) {
					want = append(want, g)
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("rule groups %v, want %v", got, want)
			}
			if !strings.Contains(toString(groups), "{{ $labels.signer }}") && slices.Contains(tc.components, "signer") {
				t.Error("the alerts' templates did not survive rendering")
			}
		})
	}
	// A PodMonitor per component instead, its job relabelled as the alerts expect, with
	// no metrics Service; never both, which would scrape every series twice.
	objs := objects(t, helm(t, "template", release, "charts/trustsync", "-n", ns, "--set", "prometheus.podMonitor.enabled=true",
		"--set", "prometheus.podMonitor.labels.release=kube-prometheus"))
	var podMonitored []string
	for _, o := range objs {
		switch {
		case o.GetKind() == "ServiceMonitor" || strings.HasSuffix(o.GetName(), "-metrics"):
			t.Errorf("with podMonitor, %s %s rendered", o.GetKind(), o.GetName())
		case o.GetKind() == "PodMonitor":
			c := o.GetLabels()["app.kubernetes.io/component"]
			podMonitored = append(podMonitored, c)
			if text := toString(o.Object); o.GetLabels()["release"] != "kube-prometheus" || !strings.Contains(text, `"replacement":"trustsync-`+c+`","targetLabel":"job"`) {
				t.Errorf("PodMonitor %s: labels %v, spec %s; want the selector's labels and job trustsync-%s", o.GetName(), o.GetLabels(), text, c)
			}
		}
	}
	slices.Sort(podMonitored)
	if !reflect.DeepEqual(podMonitored, []string{"agent", "controller", "signer", "webhook"}) {
		t.Errorf("PodMonitors for %v, want every component", podMonitored)
	}
	if out, err := renderSet(t, "prometheus.podMonitor.enabled=true,prometheus.serviceMonitor.enabled=true"); err == nil || !strings.Contains(out, "enable one") {
		t.Errorf("both monitors rendered: %v\n%s", err, out)
	}

	// Off by default: the Prometheus Operator's CRDs may not be installed.
	for _, o := range objects(t, helm(t, "template", release, "charts/trustsync", "-n", ns)) {
		if k := o.GetKind(); k == "ServiceMonitor" || k == "PodMonitor" || k == "PrometheusRule" {
			t.Errorf("a default install renders a %s", k)
		}
	}
}

// Every metric the docs name is one a binary serves: registered by a component's
// metrics constructor, trustsync_build_info (every component's), or the sidecar's own,
// which it serves only with its metrics flag (the injector sets none): a section
// naming one of those says so.
func TestDocs_EveryMetricTheyNameIsServed(t *testing.T) {
	registered := registeredMetrics(t)
	// Metrics registered where no constructor above reaches (the webhook's body budget,
	// every component's build info): each named in its prometheus.Opts.
	err := filepath.WalkDir("../../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && (d.Name() == "test" || d.Name() == "hack" || strings.HasPrefix(d.Name(), ".")) && path != "../../.." {
			if err == nil {
				return filepath.SkipDir
			}
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		for _, m := range regexp.MustCompile(`Name:\s+"(trustsync_[a-z0-9_]+)"`).FindAllStringSubmatch(string(src), -1) {
			registered[m[1]] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !registered["trustsync_build_info"] {
		t.Fatal("found no trustsync_build_info among the metrics in the source")
	}
	src, err := os.ReadFile("../../../delivery/metrics/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	sidecar := map[string]bool{}
	for _, m := range regexp.MustCompile(`"(trustsync_sidecar_[a-z0-9_]+)"`).FindAllStringSubmatch(string(src), -1) {
		sidecar[m[1]] = true
	}
	if len(sidecar) < 5 {
		t.Fatalf("read %d sidecar metrics from delivery/metrics", len(sidecar))
	}
	metric := regexp.MustCompile(`\btrustsync_[a-z0-9_]*[a-z0-9](_\*)?`)
	files, _ := filepath.Glob("../../../docs/*.md")
	checked := 0
	for _, f := range append(files, "../../../README.md") {
		if filepath.Base(f) == "benchmarks.md" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// Sections: a sidecar metric's section says when it is served.
		for _, para := range regexp.MustCompile(`\n#+ `).Split(string(data), -1) {
			for _, name := range metric.FindAllString(para, -1) {
				checked++
				base := name
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if b, ok := strings.CutSuffix(name, suffix); ok && (registered[b] || sidecar[b]) {
						base = b
					}
				}
				switch {
				case registered[base]:
				case sidecar[base] || base == "trustsync_sidecar_*":
					if flag := "--" + contract.FlagMetricsBindAddress; !strings.Contains(para, flag) {
						t.Errorf("%s names %s where it does not say the sidecar serves it only with %s, which injected sidecars lack: %q", filepath.Base(f), name, flag, strings.TrimSpace(para)[:min(120, len(strings.TrimSpace(para)))])
					}
				case strings.HasSuffix(base, "_*"):
					// A family named by its prefix (trustsync_signer_*).
				default:
					t.Errorf("%s names %s, which no trustsync binary serves", filepath.Base(f), name)
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d metric names", checked)
	}
}
