package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// The files, from the repository's root.
const (
	valuesFile = "charts/trustsync/values.yaml"
	chartFile  = "charts/trustsync/Chart.yaml"
	schemaFile = "charts/trustsync/values.schema.json"
	readmeFile = "charts/trustsync/README.md"
	installDoc = "docs/install.md"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	check := flag.Bool("check", false, "change nothing: fail naming each file that is not what values.yaml makes it")
	flag.Parse()
	stale, err := Generate(*root, !*check)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartdoc:", err)
		os.Exit(1)
	}
	if *check && len(stale) > 0 {
		fmt.Fprintf(os.Stderr, "chartdoc: %v differ from what %s makes them: run make generate\n", stale, valuesFile)
		os.Exit(1)
	}
}

// Generate makes the three files from values.yaml, writing them when write is set,
// and returns those whose content differed.
func Generate(root string, write bool) (stale []string, err error) {
	files := map[string][]byte{}
	for _, name := range []string{valuesFile, chartFile, schemaFile, readmeFile, installDoc} {
		data, err := os.ReadFile(filepath.Join(root, name))
		// The README is the one file this may make from nothing.
		if err != nil && !(name == readmeFile && os.IsNotExist(err)) {
			return nil, err
		}
		files[name] = data
	}
	values, chart, schema, readme, install := files[valuesFile], files[chartFile], files[schemaFile], files[readmeFile], files[installDoc]
	parsed, err := Parse(values)
	if err != nil {
		return nil, err
	}
	var meta struct{ Description, AppVersion string }
	if err := yaml.Unmarshal(chart, &meta); err != nil {
		return nil, fmt.Errorf("%s: %w", chartFile, err)
	}
	newSchema, err := Describe(schema, parsed)
	if err != nil {
		return nil, err
	}
	newInstall, err := Splice(string(install), Table(parsed))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", installDoc, err)
	}
	for _, f := range []struct {
		name     string
		old, new []byte
	}{
		{schemaFile, schema, newSchema},
		{readmeFile, readme, []byte(Readme(meta.Description, meta.AppVersion, parsed))},
		{installDoc, install, []byte(newInstall)},
	} {
		if bytes.Equal(f.old, f.new) {
			continue
		}
		stale = append(stale, f.name)
		if write {
			if err := os.WriteFile(filepath.Join(root, f.name), f.new, 0o644); err != nil {
				return stale, err
			}
		}
	}
	return stale, nil
}
