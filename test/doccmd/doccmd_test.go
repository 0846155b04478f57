package doccmd

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestBlock_ReadsTheCommandsAUserWouldType(t *testing.T) {
	doc := "# Title\n\n```sh\nignored before the marker\n```\n\n**Install**:\n\n" +
		"```sh\n" +
		"# a comment line\n" +
		"make image   # trailing comment\n" +
		"\n" +
		"helm install x charts/x \\\n" +
		"  --set a=b   # continued\n" +
		"kubectl label ns x 'k=v#not-a-comment' \"q # kept\"\n" +
		"echo a#b\n" +
		"```\n\n```sh\nnot this block\n```\n"
	file := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Block(file, "**Install**")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"make image", "helm install x charts/x --set a=b", `kubectl label ns x 'k=v#not-a-comment' "q # kept"`, "echo a#b"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}

	for _, tc := range []struct{ name, doc, marker, wantErr string }{
		{name: "a marker the doc no longer says fails", doc: "text\n", marker: "gone", wantErr: `no longer says "gone"`},
		{name: "no block after the marker fails", doc: "marker\ntext\n", marker: "marker", wantErr: "no ```sh block"},
		{name: "an empty block fails", doc: "marker\n```sh\n# only a comment\n```\n", marker: "marker", wantErr: "holds no command"},
		{name: "an indented block is read too", doc: "- marker\n\n  ```sh\n  ls\n  ```\n", marker: "marker"},
		{name: "an unclosed block fails", doc: "marker\n```sh\nls\n", marker: "marker", wantErr: "not closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "doc.md")
			if err := os.WriteFile(f, []byte(tc.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := Block(f, tc.marker)
			if tc.wantErr == "" {
				if err != nil || !slices.Equal(got, []string{"ls"}) {
					t.Errorf("got %q, %v; want [ls]", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("got %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}
