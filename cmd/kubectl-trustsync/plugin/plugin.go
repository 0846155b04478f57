// Package plugin is kubectl trustsync: its commands, what they read, and how they
// print. The answers themselves are package agent/report/query's.
package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/agent/report"
	"github.com/trustsync/trustsync/agent/report/query"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
)

// Exit codes scripts can rely on (docs/cli.md).
const (
	ExitOK = 0
	// ExitError: the command could not answer (bad arguments, no access).
	ExitError = 1
	// ExitNotAll: it answered, and the answer is "not everywhere": a file behind or
	// not observed (status), no pod holding the anchor (who-trusts).
	ExitNotAll = 3
)

type options struct {
	flags         *genericclioptions.ConfigFlags
	allNamespaces bool
	output        string
	stdout        io.Writer
	code          int
}

// Main runs the plugin with args and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	o := &options{flags: genericclioptions.NewConfigFlags(true), stdout: stdout}
	root := &cobra.Command{
		Use:         "trustsync",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl trustsync"},
		Short:       "Where trust stands: what every pod holds, who trusts an anchor",
		Long: `kubectl trustsync reads what the trustsync agents observed on every node (their
NodeTrustReports), the pods and the bundles, with your own credentials, and answers:

  status             does each pod hold what its sources select now?
  who-trusts ANCHOR  which pods hold this anchor?
  rotation [SIGNER]  where is the signer's CA rotation, and who lacks the new CA?
  convert -f FILE    trust-manager's Bundles as TrustTargets, and what cannot be carried over

Exit codes: 0 yes everywhere; 3 answered, not everywhere (a file behind or not
observed, or nobody holds the anchor); 1 could not answer. docs/cli.md has the JSON.`,
		SilenceUsage: true, SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(stdout)
	root.SetErr(stderr)
	o.flags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "Every namespace, not only the current one.")
	root.PersistentFlags().StringVarP(&o.output, "output", "o", "", "Output format: empty for a table, or json.")
	root.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Each pod's trust files: up to date with their sources, behind since when, or not observed",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.status(cmd.Context()) },
	}, &cobra.Command{
		Use:   "who-trusts ANCHOR",
		Short: "Every pod and file holding ANCHOR: a PEM file, or a SHA-256 in hex (or its first 12 digits or more)",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return o.whoTrusts(cmd.Context(), args[0]) },
	}, &cobra.Command{
		Use:   "rotation [SIGNER]",
		Short: "trustsync's signers' CA rotation: its phase, the new CA, how many pods selecting the signer's bundle hold it, and who does not yet",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			signer := ""
			if len(args) == 1 {
				signer = args[0]
			}
			return o.rotation(cmd.Context(), signer)
		},
	})
	root.AddCommand(o.convertCommand(os.Stdin, stderr))
	root.SetArgs(args)
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return ExitError
	}
	return o.code
}

// namespace is the namespace asked about; "" is every one.
func (o *options) namespace() (string, error) {
	if o.allNamespaces {
		return "", nil
	}
	ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

// cluster reads what the questions need.
func (o *options) cluster(ctx context.Context, namespace string) (query.Cluster, error) {
	var c query.Cluster
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return c, err
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return c, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return c, err
	}
	pods, err := core.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return c, fmt.Errorf("list pods: %w", err)
	}
	for i := range pods.Items {
		c.Pods = append(c.Pods, &pods.Items[i])
	}
	// Where no agent reports (the CRD is not installed), every file is not observed.
	if c.Reports, _, err = report.List(ctx, dyn); err != nil {
		return c, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return c, err
	}
	served, err := bundleapi.Discover(dc)
	if err != nil {
		return c, err
	}
	c.Changed = map[string]time.Time{}
	for _, api := range served.APIs() {
		list, err := bundleapi.NewStore(dyn, api).List(ctx, metav1.ListOptions{})
		if err != nil {
			return c, fmt.Errorf("list %s ClusterTrustBundles: %w", api.GroupVersion, err)
		}
		for i := range list.Items {
			b := &list.Items[i]
			c.Bundles = append(c.Bundles, b)
			c.Changed[b.Name] = lastChange(b)
		}
	}
	return c, nil
}

// lastChange is when the bundle was last written, from its managed fields.
func lastChange(b *certificatesv1.ClusterTrustBundle) time.Time {
	t := b.CreationTimestamp.Time
	for _, m := range b.ManagedFields {
		if m.Time != nil && m.Time.After(t) {
			t = m.Time.Time
		}
	}
	return t
}

func (o *options) status(ctx context.Context) error {
	ns, err := o.namespace()
	if err != nil {
		return err
	}
	c, err := o.cluster(ctx, ns)
	if err != nil {
		return err
	}
	files := c.Status()
	for _, f := range files {
		if f.State != query.UpToDate {
			o.code = ExitNotAll
		}
	}
	if o.output == "json" {
		return o.json(map[string]any{"items": nonNil(files)})
	}
	if err := o.checkOutput(); err != nil {
		return err
	}
	if len(files) == 0 {
		fmt.Fprintln(o.stdout, "No pod here receives trust from trustsync or the kubelet.")
		return nil
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tPOD\tDELIVERY\tPATH\tSTATE\tANCHORS\tDETAIL")
	for _, f := range files {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", f.Namespace, f.Pod, f.Delivery, f.Path, f.State, f.Holds, f.Expected, detail(f))
	}
	return w.Flush()
}

// detail says, in a table cell, what the state means for the file.
func detail(f query.FileStatus) string {
	switch {
	case f.State == query.Behind && f.BehindSince != nil:
		return fmt.Sprintf("behind since %s (%s ago), missing %d, not selected %d", f.BehindSince.UTC().Format(time.RFC3339), time.Since(*f.BehindSince).Round(time.Second), len(f.Missing), len(f.Unexpected))
	case f.State == query.Behind:
		return fmt.Sprintf("missing %d, not selected %d", len(f.Missing), len(f.Unexpected))
	case f.State == query.UpToDate && f.CaughtUpAfter != nil:
		return fmt.Sprintf("took the last change %.1fs after it was made", float64(*f.CaughtUpAfter))
	}
	return f.Reason
}

func (o *options) whoTrusts(ctx context.Context, arg string) error {
	ns, err := o.namespace()
	if err != nil {
		return err
	}
	c, err := o.cluster(ctx, ns)
	if err != nil {
		return err
	}
	anchors, err := c.ResolveAnchor(arg)
	if err != nil {
		return err
	}
	type answer struct {
		Anchor string         `json:"anchor"`
		Items  []query.Holder `json:"items"`
	}
	var answers []answer
	for _, a := range anchors {
		holders := c.WhoTrusts(a, ns)
		if len(holders) == 0 {
			o.code = ExitNotAll
		}
		answers = append(answers, answer{Anchor: a, Items: nonNil(holders)})
	}
	if printed, err := printJSON(o, answers); printed || err != nil {
		return err
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ANCHOR\tNAMESPACE\tPOD\tNODE\tDELIVERY\tPATH")
	for _, a := range answers {
		if len(a.Items) == 0 {
			fmt.Fprintf(w, "%s\t(no pod holds it)\t\t\t\t\n", a.Anchor[:16])
		}
		for _, h := range a.Items {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", a.Anchor[:16], h.Namespace, h.Pod, h.Node, h.Delivery, h.Path)
		}
	}
	return w.Flush()
}

// printJSON prints items as JSON when -o json asks: one alone, several as
// {"items": [...]}. It reports whether it printed; otherwise the output must be the
// table's.
func printJSON[T any](o *options, items []T) (bool, error) {
	if o.output == "json" {
		if len(items) == 1 {
			return true, o.json(items[0])
		}
		return true, o.json(map[string]any{"items": items})
	}
	return false, o.checkOutput()
}

func (o *options) checkOutput() error {
	if o.output != "" {
		return fmt.Errorf("--output %q is not supported: give json, or nothing for a table", o.output)
	}
	return nil
}

func (o *options) json(v any) error {
	enc := json.NewEncoder(o.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// nonNil makes an empty answer [] in JSON, not null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Rotation is one signer's CA rotation, as kubectl trustsync rotation prints it.
type Rotation struct {
	Signer string `json:"signer"`
	Bundle string `json:"bundle"`
	bundle.RotationStatus
	// Holding of Expected pods selecting the bundle hold NewCA; Stragglers do not.
	Holding    int               `json:"holding"`
	Expected   int               `json:"expected"`
	Stragglers []query.Straggler `json:"stragglers"`
}

func (o *options) rotation(ctx context.Context, signer string) error {
	o.allNamespaces = true // a rotation concerns every pod that selects the bundle
	c, err := o.cluster(ctx, "")
	if err != nil {
		return err
	}
	var out []Rotation
	for _, b := range c.Bundles {
		raw, ok := b.Annotations[bundle.RotationAnnotation]
		if !ok || (signer != "" && b.Spec.SignerName != signer) || slices.ContainsFunc(out, func(r Rotation) bool { return r.Bundle == b.Name }) {
			continue
		}
		r := Rotation{Signer: b.Spec.SignerName, Bundle: b.Name, Stragglers: []query.Straggler{}}
		if err := json.Unmarshal([]byte(raw), &r.RotationStatus); err != nil {
			return fmt.Errorf("bundle %s: annotation %s is not a rotation status: %w", b.Name, bundle.RotationAnnotation, err)
		}
		if r.NewCA != "" {
			p := c.Progress(r.NewCA, []*certificatesv1.ClusterTrustBundle{b})
			r.Holding, r.Expected, r.Stragglers = p.Holding, p.Expected, p.Stragglers
			if p.Holding < p.Expected {
				o.code = ExitNotAll
			}
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		if signer != "" {
			return fmt.Errorf("no live bundle of trustsync's signer %s (with annotation %s): is it a signer of this trustsync's policy?", signer, bundle.RotationAnnotation)
		}
		return fmt.Errorf("no live bundle of a trustsync signer found (annotation %s)", bundle.RotationAnnotation)
	}
	if printed, err := printJSON(o, out); printed || err != nil {
		return err
	}
	for _, r := range out {
		fmt.Fprintf(o.stdout, "Signer:       %s (bundle %s)\n", r.Signer, r.Bundle)
		fmt.Fprintf(o.stdout, "Phase:        %s (%s propagation)\n", r.Phase, r.Propagation)
		fmt.Fprintf(o.stdout, "Current CA:   %s\n", r.CurrentCA)
		if r.NewCA == "" {
			continue
		}
		fmt.Fprintf(o.stdout, "New CA:       %s\n", r.NewCA)
		if r.SignsBy != nil {
			fmt.Fprintf(o.stdout, "Signs by:     %s at the latest\n", r.SignsBy.Format(time.RFC3339))
		}
		fmt.Fprintf(o.stdout, "Holding:      %d of %d pods selecting the bundle\n", r.Holding, r.Expected)
		if len(r.Stragglers) > 0 {
			w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAMESPACE\tPOD\tNODE\tREASON\tDETAIL")
			for _, s := range r.Stragglers {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", s.Namespace, s.Pod, s.Node, s.Reason, s.Detail)
			}
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}
