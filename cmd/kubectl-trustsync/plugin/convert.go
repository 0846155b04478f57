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

	"github.com/trustsync/trustsync/signer/targets"
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
			var b targets.TrustManagerBundle
			if err := dec.Decode(&b); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("%s, document %d: %w", f, doc, err)
			}
			if b.Kind == "List" || b.Kind == "BundleList" || b.Kind == "ClusterBundleList" {
				return fmt.Errorf("%s, document %d: a %s; give the objects one per document (kubectl get bundles -o yaml | yq '.items[]' works), or convert them one by one", f, doc, b.Kind)
			}
			if !isTrustManager(b.APIVersion, b.Kind) {
				notes = append(notes, fmt.Sprintf("%s, document %d: %s %s %q is not a trust-manager Bundle or ClusterBundle; skipped", f, doc, b.APIVersion, b.Kind, b.Name))
				continue
			}
			c := targets.FromTrustManager(&b)
			notes = append(notes, c.Notes...)
			for _, bundle := range c.Bundles {
				if err := writeDoc(&out, bundle); err != nil {
					return err
				}
			}
			if err := writeDoc(&out, c.Target); err != nil {
				return err
			}
			converted++
		}
	}
	if converted == 0 {
		return errors.New("no trust-manager Bundle or ClusterBundle found")
	}
	for _, n := range notes {
		fmt.Fprintln(o.stdout, "# NOT CARRIED OVER: "+n)
		fmt.Fprintln(stderr, "not carried over: "+n)
	}
	if len(notes) > 0 {
		o.code = ExitNotAll
	}
	_, err := o.stdout.Write(out.Bytes())
	return err
}

func isTrustManager(apiVersion, kind string) bool {
	group, _, _ := strings.Cut(apiVersion, "/")
	return (group == "trust.cert-manager.io" && kind == "Bundle") || (group == "trust-manager.io" && kind == "ClusterBundle")
}

// writeDoc prints obj as a YAML document, as one would apply it: no status, no
// server-set metadata.
func writeDoc(w io.Writer, obj any) error {
	raw, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	delete(m, "status")
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	data, err := yaml.Marshal(m)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "---")
	_, err = w.Write(data)
	return err
}
