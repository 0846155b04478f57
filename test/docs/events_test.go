package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Every Event reason a trustsync component records (a reason constant, or a literal
// handed to an Event recorder) is named in docs/, in code type: a user who meets one
// on an object can look it up.
func TestDocs_EveryEventReasonIsDocumented(t *testing.T) {
	out, err := exec.Command("git", "-C", "../..", "ls-files", "*.go").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	reason := regexp.MustCompile(`(?:[Rr]eason\w*\s*=\s*|Event\([^,()]+,\s*corev1\.EventType\w+,\s*|[wW]arn(?:ing)?Once\([^,()]+,\s*[^,()]+,\s*|\.Warning\(|\.Normal\()"([A-Z][A-Za-z]+)"`)
	found := map[string]string{}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasSuffix(f, "_test.go") || strings.HasPrefix(f, "test/") || strings.HasPrefix(f, "hack/") {
			continue
		}
		data, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range reason.FindAllStringSubmatch(string(data), -1) {
			found[m[1]] = f
		}
	}
	if len(found) < 30 {
		t.Fatalf("found only %d Event reasons; the search is broken", len(found))
	}
	mds, _ := filepath.Glob("../../docs/*.md")
	var docs strings.Builder
	for _, f := range mds {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(data)
	}
	var missing []string
	for r, f := range found {
		if !strings.Contains(docs.String(), "`"+r+"`") {
			missing = append(missing, r+" ("+f+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("Event reason %s is recorded but docs/ never names it", m)
	}
}
