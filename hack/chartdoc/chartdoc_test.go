package main

import (
	"os"
	"strings"
	"testing"
)

// The chart's README, docs/install.md's table and the schema's descriptions are what
// values.yaml's comments make them: a comment changed without `make generate` fails.
func TestGenerate_TheFilesAreWhatValuesYAMLMakesThem(t *testing.T) {
	stale, err := Generate("../..", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Errorf("%v differ from what charts/trustsync/values.yaml makes them: run make generate", stale)
	}
}

// Every value a user may set says what it does.
func TestParse_EveryValueOfTheChartIsDescribed(t *testing.T) {
	parsed, err := Parse(mustRead(t, "../../"+valuesFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(parsed) < 100 {
		t.Fatalf("parsed only %d values; the parser is broken", len(parsed))
	}
	for _, v := range parsed {
		if v.Description == "" {
			t.Errorf("%s (default %s) has no comment in values.yaml: say what it does", v.Key, v.Default)
		}
	}
}

func TestParse_ACommentDescribesTheKeyBelowIt(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []Value
	}{
		{"a head comment, joined into one paragraph", "# Run it,\n# or not.\nenabled: true\n",
			[]Value{{Key: "enabled", Default: "true", Description: "Run it, or not."}}},
		{"a line comment after the head comment", "# Seconds.\nmax: 604800  # 7 days\n",
			[]Value{{Key: "max", Default: "604800", Description: "Seconds. 7 days"}}},
		{"an empty string shown quoted", "# The tag.\ntag: \"\"\n",
			[]Value{{Key: "tag", Default: `""`, Description: "The tag."}}},
		{"a commented map is a section, its keys rows of their own", "# The signer.\nsigner:\n  # Run it.\n  enabled: true\n",
			[]Value{{Key: "signer", Description: "The signer.", Section: true}, {Key: "signer.enabled", Default: "true", Description: "Run it."}}},
		{"resources are one value, on one line", "webhook:\n  # Its requests.\n  resources:\n    requests: {cpu: 50m}\n",
			[]Value{{Key: "webhook.resources", Default: "{requests: {cpu: 50m}}", Description: "Its requests."}}},
		{"a component's key takes the per-component block's description", componentIntro + "\n#   tolerations: []   # the taints it tolerates\n\nagent:\n  tolerations: []\nother:\n  tolerations: []\n",
			[]Value{{Key: "agent.tolerations", Default: "[]", Description: "the taints it tolerates"}, {Key: "other.tolerations", Default: "[]"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("value %d: got %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestSplice_RefusesADocWithoutItsMarkers(t *testing.T) {
	if _, err := Splice("# no markers\n", "| a |\n"); err == nil || !strings.Contains(err.Error(), "markers") {
		t.Errorf("got %v, want the missing markers named", err)
	}
	got, err := Splice("before\n"+BeginMarker+"old\n"+EndMarker+"after\n", "| new |\n")
	if err != nil || got != "before\n"+BeginMarker+"\n| new |\n\n"+EndMarker+"after\n" {
		t.Errorf("got %q, %v", got, err)
	}
}

func TestDescribe_ASharedDefinitionTakesOneDescription(t *testing.T) {
	schema := `{"properties": {"a": {"$ref": "#/definitions/pdb"}, "b": {"$ref": "#/definitions/pdb"}},
	            "definitions": {"pdb": {"properties": {"enabled": {"type": "boolean"}}}}}`
	if _, err := Describe([]byte(schema), []Value{{Key: "a.enabled", Description: "On."}, {Key: "b.enabled", Description: "On."}}); err != nil {
		t.Errorf("the same comment twice: %v", err)
	}
	if _, err := Describe([]byte(schema), []Value{{Key: "a.enabled", Description: "On."}, {Key: "b.enabled", Description: "Off."}}); err == nil || !strings.Contains(err.Error(), "b.enabled shares its schema") {
		t.Errorf("two comments for one definition: got %v", err)
	}
	if _, err := Describe([]byte(schema), []Value{{Key: "c", Description: "?"}}); err == nil || !strings.Contains(err.Error(), "no property for c") {
		t.Errorf("a value the schema lacks: got %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
