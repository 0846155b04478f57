// Package plugin is kubectl trustsync: its commands, what they read, and how they
// print. The answers themselves are package trustreport/query's.
package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/buildinfo"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/trustreport/query"
	"github.com/trustsync/trustsync/trustreport/reader"
)

// Exit codes scripts can rely on (docs/cli.md).
const (
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
	templates     *genericclioptions.KubeTemplatePrintFlags
	// template prints -o jsonpath=, go-template= and their kin; nil for the rest.
	template printers.ResourcePrinter
	stdout   io.Writer
	stderr   io.Writer
	code     int
}

// Main runs the plugin with args and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	o := &options{flags: genericclioptions.NewConfigFlags(true), stdout: stdout, stderr: stderr}
	root := o.command(stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return ExitError
	}
	return o.code
}

// command is the plugin's command tree over o: every subcommand and flag a user (or
// the docs) may name.
func (o *options) command(stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:         "trustsync",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl trustsync"},
		Short:       "Where trust stands: what every pod holds, who trusts an anchor",
		Long: `kubectl trustsync reads what the trustsync agents observed on every node (their
NodeTrustReports), the pods and the bundles, with your own credentials, and answers:

  status             does each pod hold what its sources select now?
  who-trusts ANCHOR  which pods hold this anchor?
  rotation [SIGNER]  where is the signer's CA rotation, and who lacks the new CA?
  rotate SIGNER      ask the signer for a new CA now (--wait: until it signs)
  inspect            what a Secret, ConfigMap or file holds: anchors, expiry, issuer, holders
  federation [PEER]  has each peer trust domain's bundle arrived, and do the pods hold it?
  grants             what may this namespace trust and ask for, and which TrustPolicy says so?
  convert -f FILE    trust-manager's Bundles as TrustTargets, and what cannot be carried over
  check              is every part of trustsync up and serving? (--wait: until it is)
  version            the plugin's release, and the cluster's

Exit codes: 0 yes everywhere; 3 answered, not everywhere (a file behind or not
observed, nobody holds the anchor, a rotation under way); 1 could not answer. docs/cli.md has the JSON.`,
		SilenceUsage: true, SilenceErrors: true,
	}
	// Cobra's own completion command would register the scripts for the command's
	// name, "trustsync", which no shell runs: ours registers kubectl-trustsync.
	root.CompletionOptions.DisableDefaultCmd = true
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return o.checkOutput() }
	root.SetOut(o.stdout)
	root.SetErr(stderr)
	o.flags.AddFlags(root.PersistentFlags())
	_ = root.RegisterFlagCompletionFunc("namespace", o.complete(namespaceNames, false, false))
	root.PersistentFlags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "Every namespace, not only the current one.")
	o.addOutputFlags(root)
	root.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Each pod's trust files: up to date with their sources, behind since when, or not observed",
		Example: `  # The pods of the current namespace
  kubectl trustsync status
  # Every namespace, as JSON, for a script (exit 3: some file behind or not observed)
  kubectl trustsync status -A -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.status(cmd.Context()) },
	}, &cobra.Command{
		Use:   "who-trusts ANCHOR",
		Short: "Every pod and file holding ANCHOR: a PEM file, or a SHA-256 in hex (or its first 12 digits or more)",
		Example: `  # Who still trusts the CA in old-ca.pem, in every namespace?
  kubectl trustsync who-trusts old-ca.pem -A
  # By the anchor's SHA-256 (of its DER), as status and the alerts print it
  kubectl trustsync who-trusts 3f2a9c0d41be -A -o yaml`,
		Args:              cobra.MatchAll(cobra.ExactArgs(1), func(_ *cobra.Command, args []string) error { return query.CheckAnchorArg(args[0]) }),
		ValidArgsFunction: o.complete(anchors, true, true),
		RunE:              func(cmd *cobra.Command, args []string) error { return o.whoTrusts(cmd.Context(), args[0]) },
	}, &cobra.Command{
		Use:   "rotation [SIGNER]",
		Short: "trustsync's signers' CA rotation: its phase, the new CA, how many pods selecting the signer's bundle hold it, and who does not yet",
		Example: `  # Every signer's rotation
  kubectl trustsync rotation
  # One signer's, and the pods that do not hold its new CA yet
  kubectl trustsync rotation trustsync.io/workload -o json`,
		Args: cobra.MatchAll(cobra.MaximumNArgs(1), func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			return checkSignerArg(args[0])
		}),
		ValidArgsFunction: o.complete(rotatingSigners, false, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			signer := ""
			if len(args) == 1 {
				signer = args[0]
			}
			return o.rotation(cmd.Context(), signer)
		},
	})
	root.AddCommand(&cobra.Command{
		Use:   "federation [PEER]",
		Short: "Each FederatedTrustDomain: Ready (or why not), the sequence held, when last refreshed, its anchors, and how many pods selecting its bundle hold them all",
		Example: `  # Every peer this cluster imports
  kubectl trustsync federation
  # One peer, by name or trust domain, as JSON (exit 3: not Ready, or pods behind)
  kubectl trustsync federation b.example -o json`,
		Args: cobra.MatchAll(cobra.MaximumNArgs(1), func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			_, tdErr := spiffeid.TrustDomainFromString(args[0])
			if errs := validation.IsDNS1123Subdomain(args[0]); len(errs) > 0 && tdErr != nil {
				return fmt.Errorf("PEER %q is neither a FederatedTrustDomain's name (%s) nor a trust domain (%v)", args[0], strings.Join(errs, "; "), tdErr)
			}
			return nil
		}),
		ValidArgsFunction: o.complete(peers, false, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return o.federation(cmd.Context(), name)
		},
	})
	root.AddCommand(&cobra.Command{
		Use:   "grants",
		Short: "What a namespace may trust and ask for certificates, and which TrustPolicy grants each",
		Example: `  # The current namespace's grants
  kubectl trustsync grants
  # Another namespace's, as JSON
  kubectl trustsync grants -n ten-a -o json
  # Every namespace's
  kubectl trustsync grants -A`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.grants(cmd.Context()) },
	})
	var clientOnly bool
	version := &cobra.Command{
		Use:   "version",
		Short: "The plugin's release, and the release the cluster runs (-o json: {\"version\": ..., \"server\": ...})",
		Example: `  kubectl trustsync version
  # The plugin's alone, without asking the cluster
  kubectl trustsync version --client
  kubectl trustsync version -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.output == outputName || o.wide() {
				return fmt.Errorf("version prints no object and no table: give -o json, yaml or a template, or nothing")
			}
			v := Versions{Version: buildinfo.String()}
			if !clientOnly {
				v.Server, v.ServerNotRead = o.serverVersions(cmd.Context())
			}
			if o.structured() {
				return o.print(v)
			}
			fmt.Fprintf(o.stdout, "kubectl-trustsync %s\n", v.Version)
			for _, c := range v.Server {
				// Labels and images of workloads anyone may label part-of trustsync.
				fmt.Fprintf(o.stdout, "%s %s (%s)\n", safe(c.Component), safe(c.Version), safe(c.Image))
			}
			if v.ServerNotRead != "" {
				fmt.Fprintf(o.stdout, "server: not read (%s)\n", v.ServerNotRead)
			}
			return nil
		},
	}
	version.Flags().BoolVar(&clientOnly, "client", false, "The plugin's release alone.")
	root.AddCommand(o.checkCommand(), o.rotateCommand(), o.inspectCommand(), o.convertCommand(os.Stdin, stderr), completionCommand(root), version)
	return root
}

// checkSignerArg refuses a SIGNER argument that is no signer's name.
func checkSignerArg(arg string) error {
	if errs := bundle.ValidateSignerName(field.NewPath("SIGNER"), arg); len(errs) > 0 {
		return fmt.Errorf("%v: a signer's name, such as trustsync.io/workload", errs.ToAggregate())
	}
	return nil
}

// CompleteName is the executable kubectl (1.26+) runs to complete `kubectl trustsync
// <TAB>`: the plugin itself, linked under this name, answers as `__complete`.
const CompleteName = "kubectl_complete-trustsync"

// Args are the plugin's arguments as it was started (argv): run as CompleteName, the
// shell's completion request.
func Args(argv []string) []string {
	if len(argv) > 0 && filepath.Base(argv[0]) == CompleteName {
		return append([]string{cobra.ShellCompRequestCmd}, argv[1:]...)
	}
	return argv[1:]
}

// completionCommand prints the shell's completion script for kubectl-trustsync, the
// executable a shell runs; `kubectl trustsync <TAB>` goes through CompleteName.
func completionCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "The shell's completion script for kubectl-trustsync",
		Long: `completion prints the completion script for kubectl-trustsync in the shell named.
For kubectl trustsync <TAB>, kubectl (1.26 and later) runs an executable named
` + CompleteName + ` on the PATH: link it to this plugin.`,
		Example: `  # kubectl-trustsync <TAB> in this bash session
  source <(kubectl-trustsync completion bash)
  # kubectl trustsync <TAB>, with kubectl's own completion loaded
  ln -s "$(command -v kubectl-trustsync)" "$(dirname "$(command -v kubectl-trustsync)")/` + CompleteName + `"`,
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		ValidArgs: []string{"bash", "zsh", "fish", "powershell"},
		RunE: func(cmd *cobra.Command, args []string) error {
			root.Use = "kubectl-trustsync"
			out := cmd.OutOrStdout()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(out, true)
			case "zsh":
				return root.GenZshCompletion(out)
			case "fish":
				return root.GenFishCompletion(out, true)
			default:
				return root.GenPowerShellCompletionWithDesc(out)
			}
		},
	}
}

// namespace is the namespace asked about; "" is every one.
func (o *options) namespace() (string, error) {
	if o.allNamespaces {
		return "", nil
	}
	ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

// cluster reads what the questions need; a read the user's credentials may not make
// says which role grants it.
func (o *options) cluster(ctx context.Context, namespace string) (query.Cluster, error) {
	c, err := o.read(ctx, namespace)
	if apierrors.IsForbidden(err) {
		return c, fmt.Errorf("%w\nkubectl trustsync reads pods, namespaces, NodeTrustReports, TrustTargets and ClusterTrustBundles (certificates.k8s.io and trustsync.io) with your own credentials; trustsync's chart aggregates exactly these into the ClusterRole view, so bind view to yourself (kubectl create clusterrolebinding NAME --clusterrole=view --user=YOU), or a role granting get and list on them", err)
	}
	return c, err
}

// clients are the typed, dynamic and metadata clients of the user's kubeconfig.
type clients struct {
	core kubernetes.Interface
	dyn  dynamic.Interface
	meta metadata.Interface
}

func (o *options) clients() (clients, error) {
	// With no kubeconfig at all, client-go falls back to http://localhost:8080, and
	// the user would read a refused connection to a server they never named.
	raw, err := o.flags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return clients{}, err
	}
	if len(raw.Clusters) == 0 && ptr.Deref(o.flags.APIServer, "") == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return clients{}, errors.New("no kubeconfig: give --kubeconfig FILE, set KUBECONFIG, or write ~/.kube/config (the file kubectl reads)")
	}
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return clients{}, err
	}
	var c clients
	if c.core, err = kubernetes.NewForConfig(cfg); err != nil {
		return clients{}, err
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return clients{}, err
	}
	if c.meta, err = metadata.NewForConfig(cfg); err != nil {
		return clients{}, err
	}
	return c, nil
}

func (o *options) read(ctx context.Context, namespace string) (query.Cluster, error) {
	var c query.Cluster
	cl, err := o.clients()
	if err != nil {
		return c, err
	}
	if c, err = reader.Once(ctx, cl.core, cl.dyn, namespace, o.warn); err != nil {
		return c, err
	}
	c.Grants = o.readGrants(ctx, cl, namespace)
	if c.Bundles, err = bundles(ctx, cl); err != nil {
		return c, err
	}
	c.Changed = map[string]time.Time{}
	for _, b := range c.Bundles {
		c.Changed[b.Name] = lastChange(b)
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
		if f.State != query.UpToDate || len(f.NotGranted) > 0 {
			o.code = ExitNotAll
		}
	}
	if o.structured() {
		return o.print(map[string]any{"items": nonNil(files)})
	}
	var pods []object
	for _, f := range files {
		pods = append(pods, object{kind: podKind, namespace: f.Namespace, name: f.Pod})
	}
	if printed, err := o.printNames(pods); printed || err != nil {
		return err
	}
	if len(files) == 0 {
		fmt.Fprintln(o.stdout, "No pod here receives trust from trustsync or the kubelet.")
		return nil
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	head := []string{"NAMESPACE", "POD", "DELIVERY", "PATH", "STATE", "ANCHORS", "DETAIL"}
	if o.wide() {
		head = append(head, "NODE", "CHANGED")
	}
	row(w, head...)
	for _, f := range files {
		cells := []string{f.Namespace, f.Pod, f.Delivery, f.Path, f.State, fmt.Sprintf("%d/%d", f.Holds, f.Expected), detail(f)}
		if o.wide() {
			cells = append(cells, f.Node, timestamp(f.ChangedAt))
		}
		row(w, cells...)
	}
	return w.Flush()
}

// timestamp is t as a wide table's cell: RFC 3339 in UTC, or "-" when unknown.
func timestamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// detail says, in a table cell, what the state means for the file.
func detail(f query.FileStatus) string {
	if len(f.NotGranted) > 0 {
		return fmt.Sprintf("holds %d anchors its namespace is no longer granted (kubectl trustsync grants -n %s); %s", len(f.NotGranted), f.Namespace, stateDetail(f))
	}
	return stateDetail(f)
}

func stateDetail(f query.FileStatus) string {
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
	if c.Contents, err = o.contents(ctx, ns); err != nil {
		return err
	}
	anchors, err := c.ResolveAnchor(arg)
	if err != nil {
		return err
	}
	// "Nobody holds it" is an answer only where every running pod with trust files
	// was seen and none reads trust where no one can see; otherwise what could not be
	// seen is named.
	unseen, env := c.Unseen(ns), c.EnvHolders(ns)
	var answers []trustAnswer
	for _, a := range anchors {
		holders := append(c.WhoTrusts(a, ns), c.ObjectsHolding(a, ns)...)
		if len(holders) == 0 || len(unseen) > 0 || len(env) > 0 {
			o.code = ExitNotAll
		}
		answers = append(answers, trustAnswer{Anchor: a, Items: nonNil(holders), NotSeen: nonNil(unseen), NotObservable: nonNil(env)})
	}
	if printed, err := printStructured(o, answers); printed || err != nil {
		return err
	}
	var holders []object
	for _, a := range answers {
		for _, h := range a.Items {
			if h.Kind != "" {
				holders = append(holders, object{kind: kindOf(h.Kind), namespace: h.Namespace, name: h.Name})
			} else {
				holders = append(holders, object{kind: podKind, namespace: h.Namespace, name: h.Pod})
			}
		}
	}
	if printed, err := o.printNames(holders); printed || err != nil {
		return err
	}
	// -o wide: the whole SHA-256 (what who-trusts and the alerts take) and when the
	// holder last changed.
	anchor := short
	head := []string{"ANCHOR", "NAMESPACE", "POD/OBJECT", "NODE", "DELIVERY/WRITER", "PATH/KEY"}
	if o.wide() {
		anchor = func(id string) string { return id }
		head = append(head, "CHANGED")
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	row(w, head...)
	for _, a := range answers {
		switch {
		case len(a.Items) == 0 && len(unseen) == 0 && len(env) == 0:
			row(w, anchor(a.Anchor), "(no pod or object holds it)")
		case len(a.Items) == 0:
			row(w, anchor(a.Anchor), "(none seen holding it; some could not be seen)")
		}
		for _, h := range a.Items {
			ns := h.Namespace
			if h.NotGranted {
				ns += " (not granted)"
			}
			cells := []string{anchor(a.Anchor), ns, h.Pod, h.Node, h.Delivery, h.Path}
			if h.Kind != "" {
				cells = []string{anchor(a.Anchor), ns, h.Kind + "/" + h.Name, "", h.Writer, h.Key}
			}
			if o.wide() {
				cells = append(cells, timestamp(h.ChangedAt))
			}
			row(w, cells...)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	printUnseen(o.stdout, unseen)
	printNotObservable(o.stdout, "may hold it", env)
	return nil
}

// contents reads what the objects trustsync writes hold, with the user's credentials.
func (o *options) contents(ctx context.Context, namespace string) ([]query.ObjectContent, error) {
	cl, err := o.clients()
	if err != nil {
		return nil, err
	}
	return reader.Contents(ctx, cl.dyn, cl.meta, namespace, o.warn), nil
}

// warn says on stderr what the answer could not see. Warnings carry what tenants
// wrote (report errors, object names): made safe for the terminal.
func (o *options) warn(w string) { fmt.Fprintln(o.stderr, "warning: "+safe(w)) }

// printNotObservable says, under a table, which pods read trust where no one can see.
func printNotObservable(w io.Writer, what string, pods []query.Straggler) {
	if len(pods) == 0 {
		return
	}
	fmt.Fprintf(w, "Not observable: %d pods read trust objects through env or envFrom, resolved when they started, and %s:\n", len(pods), what)
	for i, p := range pods {
		if i == 10 {
			fmt.Fprintf(w, "  and %d more (-o json)\n", len(pods)-10)
			break
		}
		fmt.Fprintf(w, "  %s/%s: %s\n", safe(p.Namespace), safe(p.Pod), safe(p.Detail))
	}
}

// trustAnswer is who-trusts' answer for one anchor.
type trustAnswer struct {
	Anchor string         `json:"anchor"`
	Items  []query.Holder `json:"items"`
	// NotSeen: running pods with trust files no readable report covers, by node;
	// empty when every one was seen.
	NotSeen []query.Unseen `json:"notSeen"`
	// NotObservable: running pods reading a trust object through env or envFrom,
	// which may hold any anchor their object held when they started.
	NotObservable []query.Straggler `json:"notObservable"`
}

// printUnseen says, under a table, which pods the answer could not see.
func printUnseen(w io.Writer, unseen []query.Unseen) {
	if len(unseen) == 0 {
		return
	}
	n := 0
	for _, u := range unseen {
		n += len(u.Pods)
	}
	fmt.Fprintf(w, "Not seen: %d pods with trust files on %d nodes, which may hold it:\n", n, len(unseen))
	for _, u := range unseen {
		pods := u.Pods
		more := ""
		if len(pods) > 5 {
			pods, more = pods[:5], fmt.Sprintf(" and %d more", len(u.Pods)-5)
		}
		fmt.Fprintf(w, "  node %s (%s): %s%s\n", safe(u.Node), safe(u.Reason), safe(strings.Join(pods, ", ")), more)
	}
}

// short is the first 16 digits of an anchor id, as tables print it.
func short(id string) string {
	if len(id) > 16 {
		return id[:16]
	}
	return id
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
	// Namespace, with -n, is the one namespace whose pods are counted and listed.
	Namespace string `json:"namespace,omitempty"`
	bundle.RotationStatus
	// Holding of Expected pods selecting the bundle hold NewCA; Stragglers do not.
	Holding    int               `json:"holding"`
	Expected   int               `json:"expected"`
	Stragglers []query.Straggler `json:"stragglers"`
	NotStarted []string          `json:"notStarted,omitempty"`
	// NotObservable are the pods reading the bundle where no one can see (through
	// env, or a truststore whose password is in a Secret): the new CA waits the
	// floor (FloorUntil) for them.
	NotObservable []query.Straggler `json:"notObservable,omitempty"`
	// Objects are the ConfigMaps and Secrets TrustTargets write from the bundle, a
	// target at a time, and the annotated objects filled from it (caBundle fields
	// included): the new CA waits until they hold it too.
	Objects []query.ObjectProgress `json:"objects,omitempty"`
	// Unobserved says which annotated objects cannot be counted at all: the new CA
	// waits the floor for them.
	Unobserved []string `json:"unobserved,omitempty"`
	// NotGranted are the pods selecting the bundle in namespaces not granted it:
	// not waited for. Skipped are the stragglers an operator named in the CA
	// Secret's trustsync.io/rotation-skip-pods: not waited for either.
	NotGranted []string          `json:"notGranted,omitempty"`
	Skipped    []query.Straggler `json:"skipped,omitempty"`
}

// keyPlace is where a CA's key lives, for rotation's text: its Secret or its keeper.
func keyPlace(key string) string {
	switch key {
	case "":
		return ""
	case "secret":
		return " (key in the CA Secret)"
	}
	return " (key " + safe(key) + ")"
}

func (o *options) rotation(ctx context.Context, signer string) error {
	// A rotation concerns every pod that selects the bundle: every namespace's,
	// unless -n names one (how far is my namespace?).
	ns := ""
	if !o.allNamespaces {
		ns = ptr.Deref(o.flags.Namespace, "")
	}
	c, err := o.cluster(ctx, ns)
	if err != nil {
		return err
	}
	var out []Rotation
	for _, b := range c.Bundles {
		raw, ok := b.Annotations[bundle.RotationAnnotation]
		if !ok || (signer != "" && b.Spec.SignerName != signer) || slices.ContainsFunc(out, func(r Rotation) bool { return r.Bundle == b.Name }) {
			continue
		}
		r := Rotation{Signer: b.Spec.SignerName, Bundle: b.Name, Namespace: ns, Stragglers: []query.Straggler{}}
		if err := json.Unmarshal([]byte(raw), &r.RotationStatus); err != nil {
			return fmt.Errorf("bundle %s: annotation %s is not a rotation status: %w", b.Name, bundle.RotationAnnotation, err)
		}
		if r.NewCA != "" {
			p := c.Progress(r.NewCA, []*certificatesv1.ClusterTrustBundle{b})
			p.Skip(r.SkipPods)
			r.Holding, r.Expected, r.Stragglers, r.NotStarted, r.NotObservable, r.Objects, r.Unobserved = p.Holding, p.Expected, p.Stragglers, p.NotStarted, p.NotObservable, p.Objects, p.Unobserved
			r.NotGranted, r.Skipped = p.NotGranted, p.Skipped
			if !p.Done() {
				o.code = ExitNotAll
			}
		}
		// A rotation under way is "not yet", whoever holds the new CA: a script waits
		// on the exit code until the new CA signs.
		if r.Phase != bundle.RotationStable {
			o.code = ExitNotAll
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		if signer != "" {
			return fmt.Errorf("no live bundle of trustsync's signer %s (with annotation %s): is it a signer of this trustsync's policy?", signer, bundle.RotationAnnotation)
		}
		return fmt.Errorf("no live bundle of a trustsync signer found (annotation %s)", bundle.RotationAnnotation)
	}
	if printed, err := printStructured(o, out); printed || err != nil {
		return err
	}
	// -o name: the pods that do not hold the new CA yet, what an operator acts on.
	var stragglers []object
	for _, r := range out {
		for _, s := range r.Stragglers {
			stragglers = append(stragglers, object{kind: podKind, namespace: s.Namespace, name: s.Pod})
		}
	}
	if printed, err := o.printNames(stragglers); printed || err != nil {
		return err
	}
	for _, r := range out {
		fmt.Fprintf(o.stdout, "Signer:       %s (bundle %s)\n", safe(r.Signer), safe(r.Bundle))
		fmt.Fprintf(o.stdout, "Phase:        %s (%s propagation)\n", r.Phase, r.Propagation)
		fmt.Fprintf(o.stdout, "Current CA:   %s%s\n", r.CurrentCA, keyPlace(r.CurrentKey))
		if r.NewCA == "" {
			continue
		}
		fmt.Fprintf(o.stdout, "New CA:       %s%s\n", r.NewCA, keyPlace(r.NewKey))
		if r.SignsBy != nil {
			fmt.Fprintf(o.stdout, "Signs by:     %s at the latest\n", r.SignsBy.Format(time.RFC3339))
		}
		where := ""
		if r.Namespace != "" {
			where = " in namespace " + r.Namespace
		}
		fmt.Fprintf(o.stdout, "Holding:      %d of %d pods selecting the bundle%s\n", r.Holding, r.Expected, where)
		for _, obj := range r.Objects {
			line := fmt.Sprintf("%s %s (%s) in %d of %d namespaces", obj.Kind, obj.Name, obj.Writer, obj.Holding, obj.Expected)
			if obj.Writer == v1alpha1.WriterAnnotation {
				line = fmt.Sprintf("%s %s (annotated), holding it: %t", obj.Kind, path.Join(obj.Namespace, obj.Name), obj.Holding == obj.Expected)
			}
			if obj.Detail != "" {
				line += ": " + obj.Detail
			}
			fmt.Fprintf(o.stdout, "Objects:      %s\n", safe(line))
		}
		if r.FloorUntil != nil && (r.Expected == 0 || len(r.NotObservable) > 0 || len(r.Unobserved) > 0) {
			why := "no pod is observed selecting the bundle, which is not everyone holding it"
			switch {
			case len(r.NotObservable) > 0:
				why = fmt.Sprintf("%d pods read it where no one can observe", len(r.NotObservable))
			case len(r.Unobserved) > 0:
				why = strings.Join(r.Unobserved, "; ")
			}
			fmt.Fprintf(o.stdout, "Floor:        signs no earlier than %s: %s\n", r.FloorUntil.Format(time.RFC3339), why)
		}
		if len(r.NotStarted) > 0 {
			fmt.Fprintf(o.stdout, "Not waited for: %d pods none of whose containers has started (they read the current bundle when they start): %s\n", len(r.NotStarted), safe(strings.Join(r.NotStarted, ", ")))
		}
		if len(r.NotGranted) > 0 {
			fmt.Fprintf(o.stdout, "Not waited for: %d pods of namespaces not granted the bundle (TrustPolicies): %s\n", len(r.NotGranted), safe(strings.Join(r.NotGranted, ", ")))
		}
		if len(r.Skipped) > 0 {
			var named []string
			for _, s := range r.Skipped {
				named = append(named, s.Namespace+"/"+s.Pod+" ("+s.Reason+")")
			}
			fmt.Fprintf(o.stdout, "Not waited for: %d pods named in the CA Secret's trustsync.io/rotation-skip-pods: %s\n", len(r.Skipped), safe(strings.Join(named, ", ")))
		}
		printNotObservable(o.stdout, "the new CA waits the floor for them", r.NotObservable)
		if len(r.Stragglers) > 0 {
			w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
			row(w, "NAMESPACE", "POD", "NODE", "REASON", "DETAIL")
			for _, s := range r.Stragglers {
				row(w, s.Namespace, s.Pod, s.Node, s.Reason, s.Detail)
			}
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}
