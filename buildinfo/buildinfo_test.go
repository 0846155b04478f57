package buildinfo

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// VERSION is the one source: the chart's version and appVersion are the same release,
// and the chart's default image tag is v<VERSION>.
func TestVersion_TheChartSaysWhatVERSIONSays(t *testing.T) {
	raw, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(raw))
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`).MatchString(v) {
		t.Fatalf("VERSION %q is not a semantic version", v)
	}
	chart, err := os.ReadFile("../charts/trustsync/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nversion: " + v + "\n", "\nappVersion: \"" + v + "\"\n"} {
		if !strings.Contains(string(chart), want) {
			t.Errorf("Chart.yaml does not say %q", strings.TrimSpace(want))
		}
	}
}

func TestString_AStampedBuildSaysItsRelease(t *testing.T) {
	old := Version
	defer func() { Version = old }()
	Version = "1.2.3"
	if got := String(); got != "1.2.3" {
		t.Errorf("String() = %q", got)
	}
	Version = ""
	if got := String(); !strings.HasPrefix(got, "devel") {
		t.Errorf("an unstamped build says %q; want devel...", got)
	}
}

// --version's FIPS line says what the process runs in: on under GODEBUG=fips140=on or
// only (the default of a GOFIPS140 build), off otherwise.
func TestFIPSLine_SaysWhetherTheProcessRunsInFIPSMode(t *testing.T) {
	on, _ := FIPS()
	want := "FIPS 140-3 mode: off"
	if on {
		want = "FIPS 140-3 mode: on"
	}
	if got := FIPSLine(); !strings.HasPrefix(got, want) {
		t.Errorf("FIPSLine() = %q, want it to start %q", got, want)
	}
}
