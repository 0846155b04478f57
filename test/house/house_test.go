package house

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/trustsync/trustsync/"

// house is the layout docs/design.md records: each folder (a package's directory,
// relative to the module) and its floor (0 for folders off the floors: the chart,
// scripts, tests).
func house(t *testing.T) map[string]int {
	t.Helper()
	f, err := os.Open("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	paths := regexp.MustCompile("`([^`]+)`")
	out := map[string]int{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "## Layout":
			in = true
			continue
		case in && strings.HasPrefix(line, "## "):
			return out
		case !in || !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| floor") || strings.HasPrefix(line, "| ---"):
			continue
		}
		cells := strings.Split(line, "|")
		floor, _ := strconv.Atoi(strings.TrimSpace(cells[1]))
		for _, m := range paths.FindAllStringSubmatch(cells[2], -1) {
			out[strings.TrimSuffix(m[1], "/")] = floor
		}
	}
	return out
}

// pkg is one package of the module and the module's packages it imports.
type pkg struct {
	path    string // relative to the module
	imports []string
}

func packages(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var pkgs []pkg
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		p := pkg{path: strings.TrimPrefix(fields[0], module)}
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module) {
				p.imports = append(p.imports, strings.TrimPrefix(imp, module))
			}
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// floorOf is a package's floor, and whether the layout names its folder (test/e2e/*
// stands for every suite).
func floorOf(layout map[string]int, path string) (int, bool) {
	if f, ok := layout[path]; ok {
		return f, true
	}
	if strings.HasPrefix(path, "test/e2e/") {
		f, ok := layout["test/e2e/*"]
		return f, ok
	}
	return 0, false
}

// The layout table in docs/design.md is the house: every package is in it, nothing
// in it is gone, and no package imports one on a floor above its own.
func TestHouse_TheLayoutTableIsTheCodeAndNothingImportsUpward(t *testing.T) {
	layout := house(t)
	if len(layout) < 20 {
		t.Fatalf("docs/design.md's Layout table lists %d folders; is it still there?", len(layout))
	}
	pkgs := packages(t)
	for _, p := range pkgs {
		if _, ok := floorOf(layout, p.path); !ok {
			t.Errorf("package %s is not in docs/design.md's Layout table", p.path)
		}
	}
	for folder := range layout {
		if folder == "test/e2e/*" {
			continue
		}
		if st, err := os.Stat(filepath.Join("../..", folder)); err != nil || !st.IsDir() {
			t.Errorf("docs/design.md's Layout table names %s, which is not a folder", folder)
		}
	}
	for _, p := range pkgs {
		from, ok := floorOf(layout, p.path)
		if !ok || from == 0 {
			continue
		}
		for _, imp := range p.imports {
			if to, ok := floorOf(layout, imp); ok && to > from {
				t.Errorf("%s (floor %d) imports %s (floor %d): nothing imports upward", p.path, from, imp, to)
			}
		}
	}
}

// deps are the module's packages pkg links, itself included.
func deps(t *testing.T, path string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", module+path).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", path, err, out)
	}
	var mine []string
	for _, d := range strings.Fields(string(out)) {
		if strings.HasPrefix(d, module) {
			mine = append(mine, strings.TrimPrefix(d, module))
		}
	}
	return mine
}

// What each part links says what it can do: the plugin answers from reports and
// converts, so it links no controller, no delivery stage and nothing of the agent;
// the signer holds the CA keys and links nothing of the agent; the report model and
// its queries stand below the agent, the signer, the controller and the plugin; none
// of those readers of pods links the pod mutation (injector); the sidecar's wiring is
// its binary's alone; the controller renders and applies objects, so it links no pod
// pipeline, workload certificate, reloader or pod Event; rendering is pure, so it
// links neither the writer nor the watches.
func TestHouse_EachPartLinksOnlyWhatItsJobNeeds(t *testing.T) {
	stages := []string{"delivery/watch", "delivery/render", "delivery/write", "delivery/pipeline", "delivery/observe", "delivery/certificate", "delivery/podevents", "delivery/kubeclient", "delivery/metrics"}
	for _, tc := range []struct {
		pkg       string
		forbidden []string // prefixes
	}{
		{pkg: "cmd/kubectl-trustsync", forbidden: append([]string{"controller", "agent", "signer", "sidecar", "webhook", "injector"}, stages...)},
		{pkg: "cmd/signer", forbidden: []string{"agent", "controller", "sidecar", "delivery/watch", "delivery/pipeline", "injector"}},
		{pkg: "trustreport/query", forbidden: append([]string{"agent", "controller", "signer", "injector"}, stages...)},
		{pkg: "trustreport/reader", forbidden: append([]string{"agent", "controller", "signer", "injector"}, stages...)},
		{pkg: "trustmanager", forbidden: append([]string{"controller", "agent"}, stages...)},
		{pkg: "cmd/controller", forbidden: []string{"agent", "signer", "sidecar", "delivery/pipeline", "delivery/certificate", "delivery/observe", "delivery/podevents", "delivery/write", "delivery/kubeclient"}},
		{pkg: "delivery/render", forbidden: []string{"delivery/write", "delivery/watch", "delivery/pipeline", "delivery/contract"}},
	} {
		for _, d := range deps(t, tc.pkg) {
			for _, f := range tc.forbidden {
				if d == f || strings.HasPrefix(d, f+"/") {
					t.Errorf("%s links %s", tc.pkg, d)
				}
			}
		}
	}
	for _, p := range packages(t) {
		if slices.Contains(p.imports, "sidecar") && p.path != "cmd/sidecar" && !strings.HasPrefix(p.path, "test/e2e/sidecar") {
			t.Errorf("%s imports sidecar, the sidecar binary's wiring; share what it needs through delivery/", p.path)
		}
	}
}

// The API and the tenancy answers are read by every binary, the sidecar included:
// they link no client, so declaring a kind or asking a grant never reaches a server.
func TestHouse_TheAPIAndTheGrantsLinkNoClient(t *testing.T) {
	for _, pkg := range []string{"api/v1alpha1", "tenancy"} {
		out, err := exec.Command("go", "list", "-deps", module+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, d := range strings.Fields(string(out)) {
			if strings.HasPrefix(d, "k8s.io/client-go/") {
				t.Errorf("%s links %s", pkg, d)
			}
		}
	}
}
