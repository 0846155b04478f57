package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/trustmanager"
)

// convertCommand is `kubectl trustsync convert -f FILE`: trust-manager's Bundles and
// ClusterBundles as the trustsync objects that do the same, printed, not applied.
func (o *options) convertCommand(stdin io.Reader, stderr io.Writer) *cobra.Command {
	var files []string
	api := "auto"
	cmd := &cobra.Command{
		Use:   "convert -f FILE",
		Short: "Print the TrustTargets (and bundles) that do what trust-manager's Bundles in FILE do, and say plainly what cannot be carried over",
		Long: `convert reads trust-manager Bundle (trust.cert-manager.io/v1alpha1) and ClusterBundle
(trust-manager.io/v1alpha2) objects from FILE (- for standard input; YAML or JSON,
several documents or a List allowed, as kubectl get -o yaml prints them) and prints
the trustsync objects that write the same keys of the same ConfigMap or Secret into
the same namespaces: a TrustTarget each, and a ClusterTrustBundle for each inline
source, in the bundle API the cluster serves (--api). What cannot be carried over is
named on standard error and in comments, and the exit code is 3; a TrustTarget that
would write fewer anchors than trust-manager did (a source left behind) is printed
commented out, never as ready to apply. Nothing is applied: review, then kubectl
apply -f. See docs/migrate-from-trust-manager.md.`,
		Example: `  # Convert what trust-manager runs now, review, then apply
  kubectl get bundles.trust.cert-manager.io -o yaml | kubectl trustsync convert -f - > trust.yaml
  kubectl apply -f trust.yaml
  # For a cluster without the native bundle API, without asking the cluster
  kubectl trustsync convert -f bundles.yaml --api mirror
  # One List, as JSON (what would be refused is left out and named on standard error)
  kubectl trustsync convert -f bundles.yaml -o json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if len(files) == 0 {
				return errors.New("give -f FILE (or -f - for standard input): the trust-manager Bundles to convert")
			}
			if o.wide() {
				return errors.New("convert prints objects, not a table: give -o yaml (the default), json, name or a template")
			}
			switch api {
			case "auto", "native", "mirror":
			default:
				return fmt.Errorf("--api %q: give auto (the bundle API the cluster serves), native (certificates.k8s.io) or mirror (trustsync.io)", api)
			}
			return o.convert(files, api, stdin, stderr)
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "A file of trust-manager Bundles (- for standard input); repeatable.")
	cmd.Flags().StringVar(&api, "api", api, "The bundle API inline CAs are written for: auto (the one the cluster serves, asked with your kubeconfig), native (certificates.k8s.io/v1) or mirror (trustsync.io/v1alpha1).")
	return cmd
}

func (o *options) convert(files []string, api string, stdin io.Reader, stderr io.Writer) error {
	var conversions []trustmanager.Conversion
	var notes []string
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
			var raw json.RawMessage
			if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("%s, document %d: not a Kubernetes object: %w", f, doc, err)
			}
			objects, err := listItems(raw)
			if err != nil {
				return fmt.Errorf("%s, document %d: %w", f, doc, err)
			}
			for i, obj := range objects {
				where := fmt.Sprintf("%s, document %d", f, doc)
				if len(objects) > 1 || obj.inList {
					where += fmt.Sprintf(", item %d", i)
				}
				var b trustmanager.TrustManagerBundle
				if err := json.Unmarshal(obj.raw, &b); err != nil {
					return fmt.Errorf("%s: not a Kubernetes object: %w", where, err)
				}
				if !trustmanager.IsTrustManager(b.APIVersion, b.Kind) {
					notes = append(notes, fmt.Sprintf("%s: %q %q %q is not a trust-manager Bundle (trust.cert-manager.io) or ClusterBundle (trust-manager.io); skipped", where, b.APIVersion, b.Kind, b.Name))
					continue
				}
				c, err := trustmanager.FromTrustManager(&b)
				if err != nil {
					return fmt.Errorf("%s: %w", where, err)
				}
				conversions = append(conversions, c)
			}
		}
	}
	if len(conversions) == 0 {
		return errors.New("no trust-manager Bundle or ClusterBundle found")
	}
	writer, err := o.bundleAPI(api, conversions)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	// With -o json: the objects ready to apply as one List; what would be refused
	// is left out (it cannot be commented out in JSON) and named on standard error.
	var items []any
	for _, c := range conversions {
		notes = append(notes, c.Notes...)
		for _, b := range c.Bundles {
			obj, err := writer.object(b)
			if err != nil {
				return err
			}
			items = append(items, obj)
			if err := writeDoc(&out, obj, ""); err != nil {
				return err
			}
		}
		for _, t := range c.Targets {
			items = append(items, t)
			if err := writeDoc(&out, t, ""); err != nil {
				return err
			}
		}
		// What would be refused is shown for review, commented out: never printed
		// as ready to apply.
		for _, r := range c.Refused {
			notes = append(notes, r.Why)
			obj := r.Object
			if b, ok := obj.(*certificatesv1.ClusterTrustBundle); ok {
				if obj, err = writer.object(b); err != nil {
					return err
				}
			}
			if err := writeDoc(&out, obj, "# "); err != nil {
				return err
			}
		}
	}
	if len(notes) > 0 {
		o.code = ExitNotAll
	}
	for _, n := range notes {
		fmt.Fprintln(stderr, "not carried over: "+oneLine(n))
	}
	if o.output == outputJSON || o.template != nil || o.output == outputName {
		var names []object
		for i, item := range items {
			m, err := applyable(item)
			if err != nil {
				return err
			}
			items[i] = m
			u := unstructured.Unstructured{Object: m}
			names = append(names, object{kind: u.GroupVersionKind(), name: u.GetName()})
		}
		if printed, err := o.printNames(names); printed || err != nil {
			return err
		}
		return o.print(map[string]any{"apiVersion": "v1", "kind": "List", "items": nonNil(items)})
	}
	for _, n := range notes {
		// One line each, whatever the input held: a note is a comment, never YAML.
		fmt.Fprintln(o.stdout, "# NOT CARRIED OVER: "+oneLine(n))
	}
	_, err = o.stdout.Write(out.Bytes())
	return err
}

// listed is one object of a document: the document itself, or an item of a List.
type listed struct {
	raw    json.RawMessage
	inList bool
}

// listItems is what one document holds: itself, or the items of a List (kubectl get
// -o yaml prints a v1 List; a BundleList or ClusterBundleList is one too).
func listItems(raw json.RawMessage) ([]listed, error) {
	var head struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	if !strings.HasSuffix(head.Kind, "List") {
		return []listed{{raw: raw}}, nil
	}
	items := make([]listed, 0, len(head.Items))
	for _, item := range head.Items {
		items = append(items, listed{raw: item, inList: true})
	}
	return items, nil
}

// bundleWriter writes an inline CA's bundle for one bundle API.
type bundleWriter struct{ api bundle.API }

// object is b as the API takes it: its apiVersion and, for the mirror, its name.
func (w bundleWriter) object(b *certificatesv1.ClusterTrustBundle) (*unstructured.Unstructured, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(w.api.GroupVersion.String())
	u.SetKind("ClusterTrustBundle")
	if w.api.Form == bundle.MirrorForm {
		u.SetName(bundle.MirrorName(b.Name))
	}
	return u, nil
}

// bundleAPI is the API inline CAs are written for: the one asked for, or with auto the
// one the cluster serves (the native API where served, as trustsync's own writers
// choose), asked only when there is a bundle to write, so that converting needs no
// cluster otherwise.
func (o *options) bundleAPI(api string, conversions []trustmanager.Conversion) (bundleWriter, error) {
	switch api {
	case "native":
		return bundleWriter{bundle.NativeV1}, nil
	case "mirror":
		return bundleWriter{bundle.Mirror}, nil
	}
	inline := slices.ContainsFunc(conversions, func(c trustmanager.Conversion) bool {
		return len(c.Bundles) > 0 || slices.ContainsFunc(c.Refused, func(r trustmanager.Refusal) bool {
			_, ok := r.Object.(*certificatesv1.ClusterTrustBundle)
			return ok
		})
	})
	if !inline {
		return bundleWriter{bundle.NativeV1}, nil
	}
	cl, err := o.clients()
	if err != nil {
		return bundleWriter{}, fmt.Errorf("inline CAs become a ClusterTrustBundle, and asking the cluster which bundle API it serves failed: %w; say --api native or --api mirror", err)
	}
	served, err := bundleapi.Discover(cl.core.Discovery())
	if err != nil {
		return bundleWriter{}, fmt.Errorf("inline CAs become a ClusterTrustBundle, and asking the cluster which bundle API it serves failed: %w; say --api native or --api mirror", err)
	}
	w, ok := served.Writer()
	if !ok {
		return bundleWriter{}, errors.New("the cluster serves no ClusterTrustBundle API (neither certificates.k8s.io nor trustsync's mirror CRD): install trustsync first, or say --api native or --api mirror")
	}
	return bundleWriter{w}, nil
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
