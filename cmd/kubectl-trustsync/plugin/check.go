package plugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trustsync/trustsync/bundle"
)

// Checked is what check found: ready when every check is.
type Checked struct {
	Ready  bool    `json:"ready"`
	Checks []Check `json:"checks"`
}

// Check is one part of trustsync, up and serving or not, and why.
type Check struct {
	Name   string `json:"name"`
	Ready  bool   `json:"ready"`
	Detail string `json:"detail"`
}

// partOf selects what trustsync's chart installs.
const partOf = "app.kubernetes.io/part-of=trustsync"

// checkKinds are the kinds the chart's CRDs serve.
var checkKinds = []string{"ClusterTrustBundle", "FederatedTrustDomain", "NodeTrustReport", "TrustPolicy", "TrustTarget"}

// checkPollInterval is how often check --wait asks again.
var checkPollInterval = 2 * time.Second

func (o *options) checkCommand() *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "check [--wait DURATION]",
		Short: "Whether trustsync is up and serving: its CRDs served, the webhook called by the API server, the signer and controller leading, an agent ready on every node",
		Example: `  # Is it working?
  kubectl trustsync check
  # Wait up to two minutes for it (after helm install, in a pipeline)
  kubectl trustsync check --wait 2m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.output == outputName || o.wide() {
				return fmt.Errorf("check prints a table, or -o json, yaml or a template")
			}
			return o.check(cmd.Context(), wait)
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "Ask again until every check passes, at most this long (e.g. 2m).")
	return cmd
}

func (o *options) check(ctx context.Context, wait time.Duration) error {
	c, err := o.clients()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(wait)
	var got Checked
	for {
		got = runChecks(ctx, c)
		if got.Ready || !time.Now().Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(checkPollInterval):
		}
	}
	if !got.Ready {
		o.code = ExitNotAll
	}
	if printed, err := printStructured(o, []Checked{got}); printed || err != nil {
		return err
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CHECK\tREADY\tDETAIL")
	for _, ch := range got.Checks {
		fmt.Fprintf(w, "%s\t%s\t%s\n", ch.Name, yesNo(ch.Ready), safe(ch.Detail))
	}
	return w.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// runChecks asks each question once.
func runChecks(ctx context.Context, c clients) Checked {
	checks := []Check{checkCRDs(c), checkWebhook(ctx, c), checkLeader(ctx, c, "signer"), checkLiveBundles(ctx, c), checkLeader(ctx, c, "controller"), checkAgents(ctx, c)}
	out := Checked{Ready: true, Checks: checks}
	for _, ch := range checks {
		out.Ready = out.Ready && ch.Ready
	}
	return out
}

func checkCRDs(c clients) Check {
	ch := Check{Name: "CRDs"}
	list, err := c.core.Discovery().ServerResourcesForGroupVersion(bundle.Mirror.GroupVersion.String())
	if err != nil {
		ch.Detail = fmt.Sprintf("%s is not served: %v (install the chart's CRDs)", bundle.Mirror.GroupVersion, err)
		return ch
	}
	var missing []string
	for _, kind := range checkKinds {
		if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Kind == kind }) {
			missing = append(missing, kind)
		}
	}
	if len(missing) > 0 {
		ch.Detail = fmt.Sprintf("%s does not serve %s: apply the chart's CRDs (dist/trustsync-crds.yaml)", bundle.Mirror.GroupVersion, strings.Join(missing, ", "))
		return ch
	}
	ch.Ready, ch.Detail = true, fmt.Sprintf("%s serves %s", bundle.Mirror.GroupVersion, strings.Join(checkKinds, ", "))
	return ch
}

// checkWebhook asks the API server to create, in a dry run, a bundle that only
// trustsync's webhook refuses: refused by it, the webhook is reachable through the API
// server, as every pod's admission needs it to be.
func checkWebhook(ctx context.Context, c clients) Check {
	ch := Check{Name: "webhook"}
	ready, detail := deploymentsReady(ctx, c, "webhook")
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": bundle.Mirror.GroupVersion.String(), "kind": "ClusterTrustBundle",
		"metadata": map[string]any{"name": "trustsync-check"},
		// A certificate block that is no certificate: the API server's schema takes
		// the string, trustsync's webhook refuses it.
		"spec": map[string]any{"trustBundle": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"},
	}}
	_, err := c.dyn.Resource(bundle.Mirror.GroupVersionResource()).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case err == nil:
		ch.Detail = detail + "; a bundle no trustsync webhook would take was accepted: its ValidatingWebhookConfiguration is missing"
	case strings.Contains(err.Error(), "admission webhook") && strings.Contains(err.Error(), "denied the request"):
		ch.Ready, ch.Detail = ready, detail+"; the API server called it (it refused a dry-run bundle)"
	default:
		ch.Detail = detail + "; the API server could not call it: " + err.Error()
	}
	return ch
}

// checkLeader finds the component's Lease: held, and renewed within its duration.
func checkLeader(ctx context.Context, c clients, component string) Check {
	ch := Check{Name: component}
	leases, err := c.core.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{LabelSelector: partOf + ",app.kubernetes.io/component=" + component})
	if err != nil {
		ch.Detail = "its Lease: " + err.Error()
		return ch
	}
	var lease *coordinationv1.Lease
	for i := range leases.Items {
		if l := &leases.Items[i]; l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			lease = l
		}
	}
	if len(leases.Items) == 0 {
		if component == "controller" {
			ch.Ready, ch.Detail = true, "not installed (targets.enabled: false)"
		} else {
			ch.Detail = "no Lease of trustsync's " + component + ": is the chart installed?"
		}
		return ch
	}
	if lease == nil || lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		ch.Detail = "no replica leads yet (its Lease has no holder)"
		return ch
	}
	age := time.Since(lease.Spec.RenewTime.Time).Round(time.Second)
	if age > time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second {
		ch.Detail = fmt.Sprintf("%s last renewed its Lease %s ago, longer than its %ds: no replica leads", *lease.Spec.HolderIdentity, age, *lease.Spec.LeaseDurationSeconds)
		return ch
	}
	ch.Ready, ch.Detail = true, fmt.Sprintf("%s leads (Lease %s/%s renewed %s ago)", *lease.Spec.HolderIdentity, lease.Namespace, lease.Name, age)
	return ch
}

// checkLiveBundles: each signer has published its live bundle.
func checkLiveBundles(ctx context.Context, c clients) Check {
	ch := Check{Name: "bundles"}
	list, err := bundles(ctx, c)
	if err != nil {
		ch.Detail = err.Error()
		return ch
	}
	var signers []string
	for _, b := range list {
		if _, ok := b.Annotations[bundle.RotationAnnotation]; ok && !slices.Contains(signers, b.Spec.SignerName) {
			signers = append(signers, b.Spec.SignerName)
		}
	}
	if len(signers) == 0 {
		ch.Detail = "no signer has published its live bundle yet"
		return ch
	}
	slices.Sort(signers)
	ch.Ready, ch.Detail = true, "live bundles of "+strings.Join(signers, ", ")
	return ch
}

// checkAgents: the agent's DaemonSet has a ready, current pod on every node it runs on.
func checkAgents(ctx context.Context, c clients) Check {
	ch := Check{Name: "agents"}
	list, err := c.core.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{LabelSelector: partOf + ",app.kubernetes.io/component=agent"})
	if err != nil {
		ch.Detail = "its DaemonSet: " + err.Error()
		return ch
	}
	if len(list.Items) == 0 {
		ch.Ready, ch.Detail = true, "not installed (agent.enabled: false)"
		return ch
	}
	var details []string
	ready := true
	for _, ds := range list.Items {
		s := ds.Status
		ok := s.ObservedGeneration >= ds.Generation && s.NumberReady == s.DesiredNumberScheduled && s.UpdatedNumberScheduled == s.DesiredNumberScheduled
		ready = ready && ok
		details = append(details, fmt.Sprintf("%s/%s: %d of %d nodes ready", ds.Namespace, ds.Name, s.NumberReady, s.DesiredNumberScheduled))
	}
	ch.Ready, ch.Detail = ready, strings.Join(details, "; ")
	return ch
}

// deploymentsReady says whether the component's Deployments have every replica ready
// and current.
func deploymentsReady(ctx context.Context, c clients, component string) (bool, string) {
	list, err := c.core.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: partOf + ",app.kubernetes.io/component=" + component})
	if err != nil {
		return false, "its Deployment: " + err.Error()
	}
	if len(list.Items) == 0 {
		return false, "no Deployment of trustsync's " + component
	}
	ready := true
	var details []string
	for _, d := range list.Items {
		ok := rolledOut(d)
		ready = ready && ok
		details = append(details, fmt.Sprintf("%d of %d replicas ready", d.Status.ReadyReplicas, ptrOr(d.Spec.Replicas, 1)))
	}
	return ready, strings.Join(details, "; ")
}

func rolledOut(d appsv1.Deployment) bool {
	want := ptrOr(d.Spec.Replicas, 1)
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want && d.Status.ReadyReplicas == want && d.Status.Replicas == want
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// Versions is what version prints: the plugin's release and each component's.
type Versions struct {
	Version string          `json:"version"`
	Server  []ServerVersion `json:"server,omitempty"`
	// ServerNotRead says why the components' releases were not read.
	ServerNotRead string `json:"serverNotRead,omitempty"`
}

// ServerVersion is the release one component of the cluster's trustsync runs, as its
// workload's labels say, and its image.
type ServerVersion struct {
	Component string `json:"component"`
	Version   string `json:"version"`
	Image     string `json:"image"`
}

// serverVersions reads the release of each workload of trustsync's chart.
func (o *options) serverVersions(ctx context.Context) ([]ServerVersion, string) {
	// A cluster that does not answer soon leaves the plugin's own version to print.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := o.clients()
	if err != nil {
		return nil, err.Error()
	}
	var out []ServerVersion
	add := func(meta metav1.ObjectMeta, containers []corev1.Container) {
		if len(containers) > 0 {
			out = append(out, ServerVersion{Component: meta.Labels["app.kubernetes.io/component"], Version: meta.Labels["app.kubernetes.io/version"], Image: containers[0].Image})
		}
	}
	deployments, err := c.core.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: partOf})
	if err != nil {
		return nil, strings.SplitN(err.Error(), "\n", 2)[0]
	}
	for _, d := range deployments.Items {
		add(d.ObjectMeta, d.Spec.Template.Spec.Containers)
	}
	daemonSets, err := c.core.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{LabelSelector: partOf})
	if err != nil {
		return nil, strings.SplitN(err.Error(), "\n", 2)[0]
	}
	for _, d := range daemonSets.Items {
		add(d.ObjectMeta, d.Spec.Template.Spec.Containers)
	}
	if len(out) == 0 {
		return nil, "no workload of trustsync's chart found"
	}
	slices.SortFunc(out, func(a, b ServerVersion) int { return strings.Compare(a.Component, b.Component) })
	return out, ""
}
