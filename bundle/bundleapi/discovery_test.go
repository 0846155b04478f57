package bundleapi

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trustsync/trustsync/bundle"
)

// fakeLister serves the group versions it holds; anything else is NotFound, as the
// bundle.API server answers for a group version it does not serve.
type fakeLister map[string][]string

func (f fakeLister) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	resources, ok := f[gv]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{}, gv)
	}
	list := &metav1.APIResourceList{GroupVersion: gv}
	for _, r := range resources {
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: r})
	}
	return list, nil
}

func TestDiscover(t *testing.T) {
	tests := []struct {
		name       string
		lister     fakeLister
		wantNative *bundle.API
		wantMirror bool
		wantWriter bundle.API
		wantOK     bool
	}{
		{name: "v1 wins over older versions", lister: fakeLister{"certificates.k8s.io/v1": {bundle.Resource}, "certificates.k8s.io/v1beta1": {bundle.Resource}}, wantNative: &bundle.NativeV1, wantWriter: bundle.NativeV1, wantOK: true},
		{name: "v1beta1 when v1 is not served", lister: fakeLister{"certificates.k8s.io/v1beta1": {bundle.Resource}, "certificates.k8s.io/v1alpha1": {bundle.Resource}}, wantNative: &bundle.NativeV1beta1, wantWriter: bundle.NativeV1beta1, wantOK: true},
		{name: "v1alpha1 as the last resort", lister: fakeLister{"certificates.k8s.io/v1alpha1": {bundle.Resource}}, wantNative: &bundle.NativeV1alpha1, wantWriter: bundle.NativeV1alpha1, wantOK: true},
		{
			name:       "a served group version without the resource does not count",
			lister:     fakeLister{"certificates.k8s.io/v1": {"certificatesigningrequests"}, "trustsync.io/v1alpha1": {bundle.Resource}},
			wantMirror: true, wantWriter: bundle.Mirror, wantOK: true,
		},
		{name: "both served: writers use the native API", lister: fakeLister{"certificates.k8s.io/v1": {bundle.Resource}, "trustsync.io/v1alpha1": {bundle.Resource}}, wantNative: &bundle.NativeV1, wantMirror: true, wantWriter: bundle.NativeV1, wantOK: true},
		{name: "neither served: no writer", lister: fakeLister{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			served, err := Discover(tc.lister)
			if err != nil {
				t.Fatal(err)
			}
			if (served.Native == nil) != (tc.wantNative == nil) || (served.Native != nil && *served.Native != *tc.wantNative) || served.Mirror != tc.wantMirror {
				t.Fatalf("Discover() = %+v, want native %v mirror %v", served, tc.wantNative, tc.wantMirror)
			}
			writer, ok := served.Writer()
			if ok != tc.wantOK || writer != tc.wantWriter {
				t.Errorf("Writer() = %v, %v; want %v, %v", writer, ok, tc.wantWriter, tc.wantOK)
			}
		})
	}
}

func TestDiscover_ErrorsOtherThanNotFoundAreReported(t *testing.T) {
	broken := errLister{}
	_, err := Discover(broken)
	if err == nil || !strings.Contains(err.Error(), "clustertrustbundles.v1.certificates.k8s.io") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err = %v, want it to name the bundle.API and the cause", err)
	}
}

type errLister struct{}

func (errLister) ServerResourcesForGroupVersion(string) (*metav1.APIResourceList, error) {
	return nil, errors.New("connection refused")
}

// countingLister counts the discovery requests made of it.
type countingLister struct {
	fakeLister
	asked []string
}

func (c *countingLister) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	c.asked = append(c.asked, gv)
	return c.fakeLister.ServerResourcesForGroupVersion(gv)
}

// The periodic round asks only about what could newly be served: nothing on a cluster
// that serves native v1 and the mirror, which every sidecar would otherwise ask about
// every round.
func TestDiscoverNew_AsksOnlyAboutWhatCouldBeNew(t *testing.T) {
	all := fakeLister{"certificates.k8s.io/v1": {bundle.Resource}, "certificates.k8s.io/v1beta1": {bundle.Resource}, "trustsync.io/v1alpha1": {bundle.Resource}}
	v1, beta := bundle.NativeV1, bundle.NativeV1beta1
	tests := []struct {
		name      string
		current   bundle.Served
		wantAsked []string
		want      bundle.Served
	}{
		{name: "native v1 and the mirror watched: nothing to ask", current: bundle.Served{Native: &v1, Mirror: true}, want: bundle.Served{Native: &v1, Mirror: true}},
		{name: "native v1 without the mirror: only the mirror", current: bundle.Served{Native: &v1}, wantAsked: []string{"trustsync.io/v1alpha1"}, want: bundle.Served{Native: &v1, Mirror: true}},
		{name: "an older native version: only the newer ones", current: bundle.Served{Native: &beta, Mirror: true}, wantAsked: []string{"certificates.k8s.io/v1"}, want: bundle.Served{Native: &v1, Mirror: true}},
		{name: "nothing watched yet: everything, as Discover", current: bundle.Served{}, wantAsked: []string{"certificates.k8s.io/v1", "trustsync.io/v1alpha1"}, want: bundle.Served{Native: &v1, Mirror: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &countingLister{fakeLister: all}
			got, err := DiscoverNew(l, tc.current)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(l.asked, ",") != strings.Join(tc.wantAsked, ",") {
				t.Errorf("asked %q, want %q", l.asked, tc.wantAsked)
			}
			if (got.Native == nil) != (tc.want.Native == nil) || (got.Native != nil && *got.Native != *tc.want.Native) || got.Mirror != tc.want.Mirror {
				t.Errorf("served = %+v, want %+v", got, tc.want)
			}
		})
	}
}
