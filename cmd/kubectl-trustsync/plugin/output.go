package plugin

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// The -o formats beside the templates cli-runtime prints (jsonpath=, go-template=,
// and their -file and jsonpath-as-json forms), as kubectl get takes them.
const (
	outputTable = ""
	outputWide  = "wide"
	outputJSON  = "json"
	outputYAML  = "yaml"
	outputName  = "name"
)

// outputFormats are what -o completes to, and what its refusal lists.
var outputFormats = []string{outputJSON, outputYAML, outputName, outputWide, "jsonpath=", "jsonpath-as-json=", "jsonpath-file=", "go-template=", "go-template-file="}

// addOutputFlags binds -o and the template flags kubectl has beside it
// (--template, --allow-missing-template-keys) to every command.
func (o *options) addOutputFlags(root *cobra.Command) {
	o.templates = genericclioptions.NewKubeTemplatePrintFlags()
	flags := root.PersistentFlags()
	flags.StringVarP(&o.output, "output", "o", "", "Output format: empty for a table, wide, json, yaml, name, or a template as kubectl takes it (jsonpath=..., jsonpath-file=..., go-template=..., go-template-file=...); templates see the fields -o json prints.")
	flags.StringVar(o.templates.TemplateArgument, "template", "", "The template for -o go-template, go-template-file, jsonpath or jsonpath-file, when not given after '='.")
	flags.BoolVar(o.templates.AllowMissingKeys, "allow-missing-template-keys", true, "Ignore a field or map key a template names that the answer lacks.")
	_ = root.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return outputFormats, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	})
}

// checkOutput makes -o's printer, refusing a format or template it cannot print
// before anything is read, so a typo costs no API call.
func (o *options) checkOutput() error {
	switch o.output {
	case outputTable, outputWide, outputJSON, outputYAML, outputName:
		if *o.templates.TemplateArgument != "" && o.output != outputTable {
			return fmt.Errorf("--template is for -o go-template, go-template-file, jsonpath or jsonpath-file, not -o %q", o.output)
		}
		if *o.templates.TemplateArgument == "" {
			return nil
		}
		// kubectl's rule: --template alone is a go-template.
		o.output = "go-template"
	}
	p, err := o.templates.ToPrinter(o.output)
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		return fmt.Errorf("--output %q is not supported: give json, yaml, name, wide, jsonpath=TEMPLATE or go-template=TEMPLATE (or their -file forms), or nothing for a table", o.output)
	}
	if err != nil {
		return fmt.Errorf("--output %q: %w", o.output, err)
	}
	o.template = p
	return nil
}

// structured says -o asked for the answer's fields (json, yaml or a template) rather
// than a table or names.
func (o *options) structured() bool {
	return o.output == outputJSON || o.output == outputYAML || o.template != nil
}

// wide says -o wide: the table with the columns a narrow terminal does without.
func (o *options) wide() bool { return o.output == outputWide }

// print writes v as -o asks. YAML and the templates are made from the JSON, so all
// three see the same field names (docs/cli.md).
func (o *options) print(v any) error {
	switch {
	case o.template != nil:
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var fields map[string]any
		if err := json.Unmarshal(data, &fields); err != nil {
			return err
		}
		return o.template.PrintObj(&unstructured.Unstructured{Object: fields}, o.stdout)
	case o.output == outputYAML:
		data, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = o.stdout.Write(data)
		return err
	}
	enc := json.NewEncoder(o.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printStructured prints items as -o json, yaml or a template asks: one alone,
// several as {"items": [...]}. It reports whether it printed; otherwise the output is
// a table or names.
func printStructured[T any](o *options, items []T) (bool, error) {
	if !o.structured() {
		return false, nil
	}
	if len(items) == 1 {
		return true, o.print(items[0])
	}
	return true, o.print(map[string]any{"items": nonNil(items)})
}

// An object is what -o name prints a line for: KIND[.GROUP]/NAME, as kubectl does, so
// the lines can be handed to kubectl (kubectl get $(kubectl trustsync ... -o name)).
// As kubectl's, the line leaves the namespace out; two objects of one name in two
// namespaces are two lines.
type object struct {
	kind            schema.GroupVersionKind
	namespace, name string
}

var podKind = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}

// printNames prints each object once, in the order given, through cli-runtime's
// name printer. It reports whether -o name asked for it.
func (o *options) printNames(objects []object) (bool, error) {
	if o.output != outputName {
		return false, nil
	}
	p := &printers.NamePrinter{}
	var done []object
	for _, obj := range objects {
		if slices.Contains(done, obj) {
			continue
		}
		done = append(done, obj)
		m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: obj.name}}
		m.SetGroupVersionKind(obj.kind)
		if err := p.PrintObj(m, o.stdout); err != nil {
			return true, err
		}
	}
	return true, nil
}

// kindOf is the group, version and kind of an object trustsync writes trust into,
// by its kind's name: a ConfigMap or Secret, or a kind with caBundle fields.
func kindOf(kind string) schema.GroupVersionKind {
	for _, k := range v1alpha1.CABundleKinds {
		if k.Kind == kind {
			return k.Resource.GroupVersion().WithKind(kind)
		}
	}
	return schema.GroupVersionKind{Version: "v1", Kind: kind}
}
