package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/trustsync/trustsync/trustmanager"
)

// convertCommand is `kubectl trustsync convert -f FILE`: trust-manager's Bundles and
// ClusterBundles as the trustsync objects that do the same, printed, not applied.
func (o *options) convertCommand(stdin io.Reader, stderr io.Writer) *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:   "convert -f FILE",
		Short: "Print the TrustTargets (and bundles) that do what trust-manager's Bundles in FILE do, and say plainly what cannot be carried over",
		Long: `convert reads trust-manager Bundle (trust.cert-manager.io/v1alpha1) and ClusterBundle
(trust-manager.io/v1alpha2) objects from FILE (- for standard input; YAML or JSON,
several documents allowed, as kubectl get -o yaml prints them) and prints the
trustsync objects that write the same keys of the same ConfigMap or Secret into the
same namespaces: a TrustTarget each, and a ClusterTrustBundle for each inline source.
What cannot be carried over is printed as comments and on standard error, and the
exit code is 3. Nothing is applied: review, then kubectl apply -f. See
docs/migrate-from-trust-manager.md.`,
		Example: `  # Convert what trust-manager runs now, review, then apply
  kubectl get bundles.trust.cert-manager.io -o yaml | yq '.items[]' | kubectl trustsync convert -f - > trust.yaml
  kubectl apply -f trust.yaml
  # One List, as JSON (what would be refused is left out and named on standard error)
  kubectl trustsync convert -f bundles.yaml -o json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if len(files) == 0 {
				return errors.New("give -f FILE (or -f - for standard input): the trust-manager Bundles to convert")
			}
			return o.convert(files, stdin, stderr)
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "A file of trust-manager Bundles (- for standard input); repeatable.")
	return cmd
}

func (o *options) convert(files []string, stdin io.Reader, stderr io.Writer) error {
	var out bytes.Buffer
	var notes []string
	// With -o json: the objects ready to apply as one List; what would be refused
	// is left out (it cannot be commented out in JSON) and named on standard error.
	var items []any
	converted := 0
	for _, f := range files {
		r := stdin
		if f != "-" {
			file, err := os.Open(f)
			if err != nil {
				return err
			}
			defer file.Close()
			r = file
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
		for doc := 1; ; doc++ {
			var b trustmanager.TrustManagerBundle
			if err := dec.Decode(&b); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("%s, document %d: not a Kubernetes object: %w", f, doc, err)
			}
			if b.Kind == "List" || b.Kind == "BundleList" || b.Kind == "ClusterBundleList" {
				return fmt.Errorf("%s, document %d: a %s; give the objects one per document (kubectl get bundles -o yaml | yq '.items[]' works), or convert them one by one", f, doc, b.Kind)
			}
			if !trustmanager.IsTrustManager(b.APIVersion, b.Kind) {
				notes = append(notes, fmt.Sprintf("%s, document %d: %q %q %q is not a trust-manager Bundle (trust.cert-manager.io) or ClusterBundle (trust-manager.io); skipped", f, doc, b.APIVersion, b.Kind, b.Name))
				continue
			}
			c, err := trustmanager.FromTrustManager(&b)
			if err != nil {
				return fmt.Errorf("%s, document %d: %w", f, doc, err)
			}
			notes = append(notes, c.Notes...)
			for _, bundle := range c.Bundles {
				items = append(items, bundle)
				if err := writeDoc(&out, bundle, ""); err != nil {
					return err
				}
			}
			for _, t := range c.Targets {
				items = append(items, t)
				if err := writeDoc(&out, t, ""); err != nil {
					return err
				}
			}
			// What would be refused is shown for review, commented out: never
			// printed as ready to apply.
			for _, r := range c.Refused {
				notes = append(notes, r.Why)
				if err := writeDoc(&out, r.Object, "# "); err != nil {
					return err
				}
			}
			converted++
		}
	}
	if converted == 0 {
		return errors.New("no trust-manager Bundle or ClusterBundle found")
	}
	if len(notes) > 0 {
		o.code = ExitNotAll
	}
	for _, n := range notes {
		fmt.Fprintln(stderr, "not carried over: "+oneLine(n))
	}
	if o.output == "json" {
		for i, item := range items {
			m, err := applyable(item)
			if err != nil {
				return err
			}
			items[i] = m
		}
		return o.print(map[string]any{"apiVersion": "v1", "kind": "List", "items": nonNil(items)})
	}
	for _, n := range notes {
		// One line each, whatever the input held: a note is a comment, never YAML.
		fmt.Fprintln(o.stdout, "# NOT CARRIED OVER: "+oneLine(n))
	}
	_, err := o.stdout.Write(out.Bytes())
	return err
}

// applyable is obj as one would apply it: no status, no server-set metadata.
func applyable(obj any) (map[string]any, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	return m, nil
}

// writeDoc prints obj as a YAML document (applyable), produced by a YAML encoder;
// each line after prefix ("# " comments the document out).
func writeDoc(w io.Writer, obj any, prefix string) error {
	m, err := applyable(obj)
	if err != nil {
		return err
	}
	data, err := yaml.Marshal(m)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, prefix+"---")
	for _, line := range strings.SplitAfter(strings.TrimSuffix(string(data), "\n"), "\n") {
		line = strings.TrimSuffix(line, "\n")
		if prefix != "" {
			line = oneLine(line) // a commented line stays one comment, whatever it holds
		}
		if _, err := io.WriteString(w, prefix+line+"\n"); err != nil {
			return err
		}
	}
	return nil
}
