// Command chartdoc writes the values reference of the chart from one source, the
// comments of charts/trustsync/values.yaml: the chart's README.md (what `helm show
// readme` prints), the table in docs/install.md, and the descriptions in
// values.schema.json. `make generate` runs it; its test fails when any of the three
// differs from what values.yaml says, or when a value has no comment.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Value is one row of the reference.
type Value struct {
	// Key is the value's path, dotted: webhook.networkPolicy.enabled.
	Key string
	// Default is its default as YAML, on one line; empty for a section.
	Default string
	// Description is its comment, as one paragraph.
	Description string
	// Section: a map whose own comment introduces the values below it.
	Section bool
}

// The keys every component (webhook, signer, controller, agent) takes are documented
// once, in values.yaml's block that starts with componentIntro: a line per key,
// "#   key: default   # description".
const componentIntro = "# Each component (webhook, signer, controller, agent) also takes:"

var componentBlock = regexp.MustCompile(`(?m)^#   (\w+): .*?  # (.*)$`)

// wholeValue are maps documented as one value (their keys are Kubernetes' own).
var wholeValue = map[string]bool{"resources": true, "serviceAccount": true, "securityContext": true, "podSecurityContext": true}

// Parse reads values.yaml's values and their comments. A key without a comment of its
// own takes the per-component block's description of its name, if it has one there;
// otherwise its description is empty, which the test refuses.
func Parse(valuesYAML []byte) ([]Value, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(valuesYAML, &doc); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("values.yaml: not a map of values")
	}
	common := map[string]string{}
	for _, m := range componentBlock.FindAllStringSubmatch(string(valuesYAML), -1) {
		common[m[1]] = m[2]
	}
	var out []Value
	var walk func(prefix string, m *yaml.Node, component bool) error
	walk = func(prefix string, m *yaml.Node, component bool) error {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			key := prefix + k.Value
			head := k.HeadComment
			// The per-component block above the first component is not its comment.
			if at := strings.Index(head, componentIntro); at >= 0 {
				head = head[:at]
			}
			desc := comment(head)
			if desc == "" && component {
				desc = common[k.Value]
			}
			// A map of settings is walked into; resources and the like are one value.
			if v.Kind == yaml.MappingNode && len(v.Content) > 0 && !wholeValue[k.Value] {
				if desc != "" {
					out = append(out, Value{Key: key, Description: desc, Section: true})
				}
				isComponent := prefix == "" && (k.Value == "webhook" || k.Value == "signer" || k.Value == "controller" || k.Value == "agent")
				if err := walk(key+".", v, isComponent); err != nil {
					return err
				}
				continue
			}
			def, err := oneLine(v)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if c := comment(k.LineComment + v.LineComment); c != "" {
				desc = strings.TrimSpace(desc + " " + c)
			}
			out = append(out, Value{Key: key, Default: def, Description: desc})
		}
		return nil
	}
	return out, walk("", doc.Content[0], false)
}

// comment is a YAML comment as one paragraph: the # marks gone, lines joined. A
// commented-out example (a line holding "key: value" after the text) is kept.
func comment(c string) string {
	var words []string
	for _, line := range strings.Split(c, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if line != "" {
			words = append(words, line)
		}
	}
	return strings.Join(words, " ")
}

// oneLine is v as YAML on one line (flow style).
func oneLine(v *yaml.Node) (string, error) {
	flow := *v
	setFlow(&flow)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&flow); err != nil {
		return "", err
	}
	s := strings.TrimSpace(b.String())
	if v.Kind == yaml.ScalarNode && v.Tag == "!!str" && v.Value == "" {
		s = `""`
	}
	return s, nil
}

func setFlow(n *yaml.Node) {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = yaml.FlowStyle
		content := make([]*yaml.Node, len(n.Content))
		for i, c := range n.Content {
			cp := *c
			setFlow(&cp)
			content[i] = &cp
		}
		n.Content = content
	}
}

// Table is the values as a Markdown table.
func Table(values []Value) string {
	var b strings.Builder
	b.WriteString("| value | default | meaning |\n| --- | --- | --- |\n")
	for _, v := range values {
		def := "`" + strings.ReplaceAll(v.Default, "|", `\|`) + "`"
		if v.Section {
			def = ""
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.Key, def, strings.ReplaceAll(v.Description, "|", `\|`))
	}
	return b.String()
}

// The markers around the generated table in docs/install.md.
const (
	BeginMarker = "<!-- The values table is generated from charts/trustsync/values.yaml: make generate -->\n"
	EndMarker   = "<!-- end of the generated values table -->\n"
)

// Splice puts table between doc's markers.
func Splice(doc, table string) (string, error) {
	begin := strings.Index(doc, BeginMarker)
	end := strings.Index(doc, EndMarker)
	if begin < 0 || end < begin {
		return "", fmt.Errorf("the markers of the generated values table are missing: %q, then %q", BeginMarker, EndMarker)
	}
	return doc[:begin+len(BeginMarker)] + "\n" + table + "\n" + doc[end:], nil
}

// Readme is the chart's README.md: what it is, how to install it, every value.
func Readme(chartDescription, appVersion string, values []Value) string {
	return `# trustsync

` + chartDescription + `

Version ` + appVersion + ` (alpha: the ` + "`trustsync.io/v1alpha1`" + ` APIs may change). This README is generated
from values.yaml (` + "`make generate`" + `); the project's docs/install.md walks through an
install, docs/upgrading.md an upgrade.

## Installing

` + "```sh" + `
kubectl create namespace trustsync-system
kubectl label namespace trustsync-system pod-security.kubernetes.io/enforce=privileged
helm install trustsync ./trustsync-` + appVersion + `.tgz -n trustsync-system --wait
` + "```" + `

The node agent is a privileged CSI node plugin, hence the label: with
` + "`--set agent.enabled=false`" + ` the namespace may stay restricted, and ` + "`agent.namespace`" + `
puts the agent in a namespace of its own.

## Values

` + Table(values)
}

// Describe sets each value's description in the JSON schema, at its path; a value the
// schema lacks is an error (the schema refuses unknown keys, so it would refuse it).
func Describe(schemaJSON []byte, values []Value) ([]byte, error) {
	var schema map[string]any
	if err := json.Unmarshal(schemaJSON, &schema); err != nil {
		return nil, fmt.Errorf("values.schema.json: %w", err)
	}
	// A property defined once under definitions and referred to from several places
	// (#/definitions/pdb) takes the description of every value it stands for, which
	// must then agree.
	resolve := func(node map[string]any) map[string]any {
		if ref, ok := node["$ref"].(string); ok {
			defs, _ := schema["definitions"].(map[string]any)
			def, _ := defs[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
			return def
		}
		return node
	}
	var missing []string
	set := map[string]string{}
	for _, v := range values {
		node, at := schema, ""
		for _, part := range strings.Split(v.Key, ".") {
			props, _ := resolve(node)["properties"].(map[string]any)
			next, ok := props[part].(map[string]any)
			if !ok {
				node = nil
				break
			}
			node, at = next, fmt.Sprintf("%p", next)
		}
		if node == nil {
			missing = append(missing, v.Key)
			continue
		}
		if prev, ok := set[at]; ok && prev != v.Description {
			return nil, fmt.Errorf("%s shares its schema with another value whose comment differs: give both the same comment", v.Key)
		}
		set[at] = v.Description
		node["description"] = v.Description
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("values.schema.json has no property for %s", strings.Join(missing, ", "))
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(schema); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
