package injector

import (
	"strings"
	"testing"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

func TestObjectSources_ReadsThePodsSourceAnnotationsOnAnyObject(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		asks        bool
		want        string // the sources' paths and names, or the error
	}{
		{name: "no inject annotation: not asking", annotations: map[string]string{AnnotationBundleName: "corp"}},
		{name: "inject false: not asking", annotations: map[string]string{v1alpha1.AnnotationInject: "false", AnnotationBundleName: "corp"}},
		{name: "a bundle by name, at the default path", asks: true, annotations: map[string]string{v1alpha1.AnnotationInject: "true", AnnotationBundleName: "corp"}, want: "corp>" + DefaultPath},
		{name: "a bundle at a named key", asks: true, annotations: map[string]string{v1alpha1.AnnotationInject: "true", AnnotationBundleName: "corp", AnnotationPath: "ca.crt"}, want: "corp>ca.crt"},
		{name: "the sources list", asks: true, annotations: map[string]string{v1alpha1.AnnotationInject: "true", AnnotationSources: `[{"name":"a","path":"x.pem"},{"name":"b","path":"x.pem"}]`}, want: "a>x.pem b>x.pem"},
		{name: "no source named", asks: true, annotations: map[string]string{v1alpha1.AnnotationInject: "true"}, want: "error: trust was asked for but no source is named"},
		{name: "inject neither true nor false", asks: true, annotations: map[string]string{v1alpha1.AnnotationInject: "yes"}, want: `error: Unsupported value: "yes"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sources, asks, errs := ObjectSources(tc.annotations)
			if asks != tc.asks {
				t.Fatalf("asks %v, want %v", asks, tc.asks)
			}
			var got []string
			for _, s := range sources {
				got = append(got, s.Name+">"+s.Path)
			}
			gotS := strings.Join(got, " ")
			if len(errs) > 0 {
				gotS = "error: " + errs.ToAggregate().Error()
			}
			if !strings.HasPrefix(gotS, tc.want) && !(strings.HasPrefix(tc.want, "error: ") && strings.Contains(gotS, strings.TrimPrefix(tc.want, "error: "))) {
				t.Errorf("got %q, want %q", gotS, tc.want)
			}
		})
	}
}
