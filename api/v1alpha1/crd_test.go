package v1alpha1

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The CRDs are written by hand, for their CEL rules and descriptions; the Go types are
// what every binary reads and writes. Each must say what the other says: a field in
// Go that the schema lacks is pruned by the API server (written, then silently gone),
// and a field in the schema that Go lacks is accepted from users and then ignored.
func TestCRDs_SchemaAndGoTypesNameTheSameFields(t *testing.T) {
	for _, tc := range []struct {
		file string
		kind string
		typ  any
	}{
		{"trusttargets.trustsync.io.yaml", TrustTargetKind, TrustTarget{}},
		{"federatedtrustdomains.trustsync.io.yaml", FederatedTrustDomainKind, FederatedTrustDomain{}},
		{"nodetrustreports.trustsync.io.yaml", NodeTrustReportKind, NodeTrustReport{}},
		{"trustpolicies.trustsync.io.yaml", TrustPolicyKind, TrustPolicy{}},
		{"clustertrustbundles.trustsync.io.yaml", ClusterTrustBundleKind, ClusterTrustBundle{}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			crd := readCRD(t, tc.file)
			if crd.Spec.Group != GroupVersion.Group || crd.Spec.Names.Kind != tc.kind {
				t.Errorf("%s declares %s in group %s; want %s in %s", tc.file, crd.Spec.Names.Kind, crd.Spec.Group, tc.kind, GroupVersion.Group)
			}
			if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != GroupVersion.Version {
				t.Fatalf("%s serves %d versions; want %s alone", tc.file, len(crd.Spec.Versions), GroupVersion.Version)
			}
			compare(t, tc.kind, reflect.TypeOf(tc.typ), crd.Spec.Versions[0].Schema.OpenAPIV3Schema)
		})
	}
}

// Every CRD in the chart is declared here (a kind added to crds/ without a Go type,
// or the reverse, fails the test above or this one).
func TestCRDs_EveryCRDOfTheChartHasItsKindHere(t *testing.T) {
	files, err := filepath.Glob("../../charts/trustsync/files/crds/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs found: %v", err)
	}
	declared := []string{"trusttargets", "federatedtrustdomains", "nodetrustreports", "trustpolicies", "clustertrustbundles"}
	for _, f := range files {
		plural := strings.TrimSuffix(filepath.Base(f), ".trustsync.io.yaml")
		if !slices.Contains(declared, plural) {
			t.Errorf("%s has no kind declared in api/v1alpha1", f)
		}
	}
	for _, r := range []string{TrustTargetResource.Resource, FederatedTrustDomainResource.Resource, NodeTrustReportResource.Resource, TrustPolicyResource.Resource, ClusterTrustBundleResource.Resource} {
		if !slices.Contains(declared, r) {
			t.Errorf("resource %s is declared but not compared with a CRD", r)
		}
	}
}

// crd is the part of a CustomResourceDefinition the comparison reads.
type crd struct {
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind string `json:"kind"`
		} `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Schema struct {
				OpenAPIV3Schema *crdSchema `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

type crdSchema struct {
	Type                 string                `json:"type"`
	Properties           map[string]*crdSchema `json:"properties"`
	Items                *crdSchema            `json:"items"`
	PreserveUnknown      bool                  `json:"x-kubernetes-preserve-unknown-fields"`
	AdditionalProperties *crdSchema            `json:"additionalProperties"`
}

func readCRD(t *testing.T, file string) crd {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../../charts/trustsync/files/crds", file))
	if err != nil {
		t.Fatal(err)
	}
	var c crd
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return c
}

// opaque are Kubernetes' own types, which a schema may leave to the API server
// (preserve-unknown-fields) or describe: their shape is upstream's, not ours.
var opaque = map[reflect.Type]bool{
	reflect.TypeOf(metav1.ObjectMeta{}):    true,
	reflect.TypeOf(metav1.LabelSelector{}): true,
	reflect.TypeOf(metav1.Condition{}):     true,
}

// compare walks the Go type and the schema together at path.
func compare(t *testing.T, path string, typ reflect.Type, s *crdSchema) {
	t.Helper()
	if s == nil {
		t.Errorf("%s: the schema does not describe it", path)
		return
	}
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if opaque[typ] {
		if s.Type != "object" {
			t.Errorf("%s: schema type %q; want object", path, s.Type)
		}
		return
	}
	switch typ {
	case reflect.TypeOf(metav1.Time{}), reflect.TypeOf(metav1.MicroTime{}):
		if s.Type != "string" {
			t.Errorf("%s: schema type %q; a time is a string", path, s.Type)
		}
		return
	}
	want := map[reflect.Kind]string{reflect.String: "string", reflect.Bool: "boolean", reflect.Int: "integer", reflect.Int64: "integer",
		reflect.Uint64: "integer", reflect.Int32: "integer", reflect.Slice: "array", reflect.Struct: "object", reflect.Map: "object"}[typ.Kind()]
	if s.Type != want {
		t.Errorf("%s: schema type %q; the Go type %s wants %q", path, s.Type, typ, want)
		return
	}
	switch typ.Kind() {
	case reflect.Slice:
		compare(t, path+"[]", typ.Elem(), s.Items)
	case reflect.Map:
		if s.AdditionalProperties == nil && !s.PreserveUnknown {
			t.Errorf("%s: a map in Go; the schema says nothing of its values", path)
		}
	case reflect.Struct:
		fields := jsonFields(typ)
		if s.PreserveUnknown && len(s.Properties) == 0 {
			t.Errorf("%s: the schema keeps any field (x-kubernetes-preserve-unknown-fields) without naming them; describe %s's fields %v so the API server checks what is written", path, typ, keys(fields))
			return
		}
		for name, f := range fields {
			compare(t, path+"."+name, f, s.Properties[name])
		}
		for name := range s.Properties {
			if _, ok := fields[name]; !ok {
				t.Errorf("%s.%s: in the schema, not in the Go type %s: users may write it and nothing reads it", path, name, typ)
			}
		}
	}
}

// jsonFields are a struct's fields by JSON name, inlined structs flattened.
func jsonFields(typ reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			if f.Type == reflect.TypeOf(metav1.TypeMeta{}) {
				out["apiVersion"], out["kind"] = reflect.TypeOf(""), reflect.TypeOf("")
				continue
			}
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func keys(m map[string]reflect.Type) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
