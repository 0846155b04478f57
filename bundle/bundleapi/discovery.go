package bundleapi

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/trustsync/trustsync/bundle"
)

// ResourceLister is the piece of client-go's discovery client that Discover needs.
type ResourceLister interface {
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// Discover asks the API server which bundle APIs it serves: the newest native version
// (v1, then v1beta1, then v1alpha1) and the mirror CRD.
func Discover(lister ResourceLister) (bundle.Served, error) {
	var served bundle.Served
	for _, api := range bundle.NativeAPIs {
		ok, err := serves(lister, api)
		if err != nil {
			return bundle.Served{}, err
		}
		if ok {
			served.Native = &api
			break
		}
	}
	ok, err := serves(lister, bundle.Mirror)
	if err != nil {
		return bundle.Served{}, err
	}
	served.Mirror = ok
	return served, nil
}

// DiscoverNew asks only about what could be served beyond current: native versions
// newer than the one in use (none once v1 is) and the mirror when it is not watched
// yet. An API's disappearance is not its question: a watch on it sees 404s, and the
// watcher then runs Discover. On a cluster serving native v1 and the mirror CRD it
// makes no request at all, where Discover makes two.
func DiscoverNew(lister ResourceLister, current bundle.Served) (bundle.Served, error) {
	served := current
	for _, api := range bundle.NativeAPIs {
		if current.Native != nil && *current.Native == api {
			break // what is in use is the newest worth asking about
		}
		ok, err := serves(lister, api)
		if err != nil {
			return current, err
		}
		if ok {
			served.Native = &api
			break
		}
	}
	if !current.Mirror {
		ok, err := serves(lister, bundle.Mirror)
		if err != nil {
			return current, err
		}
		served.Mirror = ok
	}
	return served, nil
}

func serves(lister ResourceLister, api bundle.API) (bool, error) {
	list, err := lister.ServerResourcesForGroupVersion(api.GroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("failed to discover whether %s is served: %w", api, err)
	}
	for _, r := range list.APIResources {
		if r.Name == bundle.Resource {
			return true, nil
		}
	}
	return false, nil
}

// RESTResourceLister answers discovery with plain GETs of /apis/<group>/<version>.
// client-go's discovery client links the scheme of every API group, several MiB of
// resident memory that the sidecar, which runs in every pod, cannot afford.
type RESTResourceLister struct {
	Client rest.Interface
}

// ServerResourcesForGroupVersion implements ResourceLister.
func (l RESTResourceLister) ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error) {
	raw, err := l.Client.Get().AbsPath("/apis/" + groupVersion).Do(context.TODO()).Raw()
	if err != nil {
		return nil, err
	}
	list := &metav1.APIResourceList{}
	if err := json.Unmarshal(raw, list); err != nil {
		return nil, fmt.Errorf("failed to decode discovery for %s: %w", groupVersion, err)
	}
	return list, nil
}
