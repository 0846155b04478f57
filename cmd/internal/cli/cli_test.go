package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// childArgs, when set, makes the test binary a trustsync binary for one run: Parse,
// one structured log line, exit. Parse exits the process, so it is run in a child.
const childArgs = "TRUSTSYNC_CLI_TEST_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(childArgs); ok {
		Parse(pflag.NewFlagSet("trustsync-test", pflag.ContinueOnError), "a test binary", strings.Fields(args))
		klog.InfoS("Serving", "address", ":10250")
		klog.Flush()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// --logging-format json gives a log collector one JSON object per line, with the
// structured keys as fields; text stays klog's; any other format is refused at start,
// naming it.
func TestParse_LoggingFormat(t *testing.T) {
	for _, tc := range []struct {
		name, args string
		exit       int
		check      func(t *testing.T, out string)
	}{
		{name: "text by default: klog's header and key=value", exit: 0, check: func(t *testing.T, out string) {
			if !strings.Contains(out, `"Serving" address=":10250"`) {
				t.Errorf("not klog's text: %q", out)
			}
		}},
		{name: "json: one object per line, the keys as fields", args: "--logging-format=json", exit: 0, check: func(t *testing.T, out string) {
			var line struct {
				Msg     string `json:"msg"`
				Address string `json:"address"`
			}
			if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &line); err != nil || line.Msg != "Serving" || line.Address != ":10250" {
				t.Errorf("not one JSON object with msg and address (%v): %q", err, out)
			}
		}},
		{name: "an unknown format is refused at start, naming it", args: "--logging-format=xml", exit: 2, check: func(t *testing.T, out string) {
			if !strings.Contains(out, `"xml": Unsupported log format`) || strings.Contains(out, "Serving") {
				t.Errorf("want the refusal naming xml before anything runs: %q", out)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childArgs+"="+tc.args)
			out, err := cmd.CombinedOutput()
			code := 0
			if exit, ok := err.(*exec.ExitError); ok {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.exit {
				t.Fatalf("exit %d, want %d: %s", code, tc.exit, out)
			}
			tc.check(t, string(out))
		})
	}
}
