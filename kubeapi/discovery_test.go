package kubeapi

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// lister answers one group version with resources, and with err when set; any other
// group version is NotFound, as the API server answers an unserved one.
type lister struct {
	groupVersion string
	resources    []string
	err          error
}

func (l lister) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	if l.err != nil {
		return nil, l.err
	}
	if gv != l.groupVersion {
		return nil, apierrors.NewNotFound(schema.GroupResource{}, gv)
	}
	list := &metav1.APIResourceList{GroupVersion: gv}
	for _, r := range l.resources {
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: r})
	}
	return list, nil
}

func TestServes_IsTheAPIServersAnswerAndAnOutageIsNoAnswer(t *testing.T) {
	pcrs := schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "podcertificaterequests"}
	for _, tc := range []struct {
		name    string
		lister  lister
		want    bool
		wantErr string
	}{
		{name: "a resource listed in its group version is served", lister: lister{groupVersion: "certificates.k8s.io/v1", resources: []string{"certificatesigningrequests", "podcertificaterequests"}}, want: true},
		{name: "a resource its group version does not list is not served", lister: lister{groupVersion: "certificates.k8s.io/v1", resources: []string{"certificatesigningrequests"}}},
		{name: "a group version the server does not serve (404) serves nothing", lister: lister{groupVersion: "certificates.k8s.io/v1beta1", resources: []string{"podcertificaterequests"}}},
		{name: "an unanswered discovery is an error naming the group version, never a no", lister: lister{err: errors.New("connection refused")}, wantErr: "failed to discover whether the API server serves podcertificaterequests.v1.certificates.k8s.io: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Serves(tc.lister, pcrs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Serves = %v, %v; want the error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Serves = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
