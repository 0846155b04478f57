package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every test, benchmark or fuzz target README.md and docs/ cite as proof exists under
// that name (a family cited as `TestX_*` has at least one member): a renamed test
// leaves no claim resting on nothing.
func TestDocs_EveryCitedTestExists(t *testing.T) {
	out, err := exec.Command("git", "-C", "../..", "grep", "-h", "-E", `^func (Test|Benchmark|Fuzz)[A-Z]`, "--", "*_test.go").Output()
	if err != nil {
		t.Fatalf("git grep: %v", err)
	}
	defined := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)\w+)`).FindAllStringSubmatch(string(out), -1)
	names := map[string]bool{}
	for _, m := range defined {
		names[m[1]] = true
	}
	files, _ := filepath.Glob("../../docs/*.md")
	cited := regexp.MustCompile(`\b((?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*)`)
	n := 0
	for _, f := range append(files, "../../README.md") {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range cited.FindAllStringSubmatch(string(data), -1) {
			n++
			name := m[1]
			if prefix, family := strings.CutSuffix(name, "_"); family {
				if !hasPrefix(names, prefix+"_") {
					t.Errorf("%s cites the family %s*, of which no test exists", filepath.Base(f), name)
				}
				continue
			}
			if !names[name] {
				t.Errorf("%s cites %s, which no test file defines (renamed?)", filepath.Base(f), name)
			}
		}
	}
	if n < 50 {
		t.Fatalf("found only %d citations; the search is broken", n)
	}
}

func hasPrefix(names map[string]bool, prefix string) bool {
	for n := range names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}
