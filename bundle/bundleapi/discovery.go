package bundleapi

import (
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/kubeapi"
)

// Discover asks the API server which bundle APIs it serves: the newest native version
// (v1, then v1beta1, then v1alpha1) and the mirror CRD.
func Discover(lister kubeapi.ResourceLister) (bundle.Served, error) {
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
func DiscoverNew(lister kubeapi.ResourceLister, current bundle.Served) (bundle.Served, error) {
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

func serves(lister kubeapi.ResourceLister, api bundle.API) (bool, error) {
	return kubeapi.Serves(lister, api.GroupVersion.WithResource(bundle.Resource))
}
