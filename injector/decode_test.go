package injector

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// TestDecodePod_InjectsAsTheFullPod is the guard on DecodePod's partial decoding: every
// golden case, sent as the API server sends it (JSON), gets from Inject exactly the
// same patch, warnings, skip reason or refusal whether the pod was decoded in full or
// only in the fields Inject reads.
func TestDecodePod_InjectsAsTheFullPod(t *testing.T) {
	for name, input := range goldenInputs(t) {
		t.Run(name, func(t *testing.T) {
			raw, err := json.Marshal(&input.Pod)
			if err != nil {
				t.Fatal(err)
			}
			assertSameInjection(t, raw, input.Namespace, input.NamespaceAnnotations, input.config())
		})
	}
}

// goldenInputs reads every testdata/<case>.in.yaml, by case name.
func goldenInputs(tb testing.TB) map[string]goldenInput {
	tb.Helper()
	files, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil || len(files) == 0 {
		tb.Fatalf("no golden inputs: %v", err)
	}
	inputs := map[string]goldenInput{}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			tb.Fatal(err)
		}
		var input goldenInput
		if err := yaml.UnmarshalStrict(data, &input); err != nil {
			tb.Fatalf("%s: %v", file, err)
		}
		inputs[strings.TrimSuffix(filepath.Base(file), ".in.yaml")] = input
	}
	return inputs
}

// assertSameInjection injects the pod raw holds twice, decoded in full and by
// DecodePod, and fails on any difference in what Inject says. The pod is sent as the
// API server sends it: decoded in full, case-sensitively, and written out again. Input
// the full decoding refuses is no case, since the API server sends only pods it has
// decoded itself.
func assertSameInjection(t *testing.T, raw []byte, namespace string, nsAnnotations map[string]string, cfg Config) {
	t.Helper()
	var sent corev1.Pod
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &sent); err != nil {
		return
	}
	canonical, err := json.Marshal(&sent)
	if err != nil {
		t.Fatal(err)
	}
	full := &corev1.Pod{}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(canonical, full); err != nil {
		t.Fatal(err)
	}
	partial, err := DecodePod(canonical)
	if err != nil {
		t.Fatalf("the API server's JSON of a pod is refused: %v\n%s", err, canonical)
	}
	want, wantErr := Inject(full, namespace, nsAnnotations, cfg)
	got, gotErr := Inject(partial, namespace, nsAnnotations, cfg)
	if errString(gotErr) != errString(wantErr) {
		t.Fatalf("partially decoded pod: error %q; fully decoded: %q", errString(gotErr), errString(wantErr))
	}
	if wantErr != nil {
		return
	}
	wantPatch, err := want.JSON()
	if err != nil {
		t.Fatal(err)
	}
	gotPatch, err := got.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if string(gotPatch) != string(wantPatch) {
		t.Errorf("partially decoded pod's patch:\n%s\nfully decoded pod's patch:\n%s", gotPatch, wantPatch)
	}
	if got.Skipped != want.Skipped || !reflect.DeepEqual(got.Warnings, want.Warnings) {
		t.Errorf("partially decoded pod: skipped %q, warnings %q; fully decoded: skipped %q, warnings %q", got.Skipped, got.Warnings, want.Skipped, want.Warnings)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestDecodePod_RefusesWhatIsNotAPod(t *testing.T) {
	for _, tc := range []struct{ name, raw string }{
		{"not JSON", `{"metadata":`},
		{"a list where an object belongs", `{"spec":{"containers":{"name":"app"}}}`},
		{"a number where annotations belong", `{"metadata":{"annotations":{"trustsync.io/inject":true}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodePod([]byte(tc.raw)); err == nil || !strings.Contains(err.Error(), "failed to decode the pod under review") {
				t.Fatalf("error %v, want one saying the pod could not be decoded", err)
			}
		})
	}
}

// FuzzDecodePod feeds arbitrary pod JSON (seeded with every golden pod) to both
// decodings: whatever the full decoding accepts, Inject must treat the same.
func FuzzDecodePod(f *testing.F) {
	for _, input := range goldenInputs(f) {
		raw, err := json.Marshal(&input.Pod)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	cfg := goldenInput{}.config()
	f.Fuzz(func(t *testing.T, raw []byte) {
		assertSameInjection(t, raw, "apps", nil, cfg)
	})
}
