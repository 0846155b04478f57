package bundle

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// Resource is the plural resource name of both bundle kinds.
const Resource = "clustertrustbundles"

// API is one served bundle API: where it lives and how its objects are named.
type API struct {
	GroupVersion schema.GroupVersion
	Form         Form
}

// GroupVersionResource returns the API's resource for REST and dynamic clients.
func (a API) GroupVersionResource() schema.GroupVersionResource {
	return a.GroupVersion.WithResource(Resource)
}

func (a API) String() string {
	return Resource + "." + a.GroupVersion.Version + "." + a.GroupVersion.Group
}

// The bundle APIs trustsync knows, native versions newest first.
var (
	NativeV1       = API{GroupVersion: schema.GroupVersion{Group: "certificates.k8s.io", Version: "v1"}, Form: NativeForm}
	NativeV1beta1  = API{GroupVersion: schema.GroupVersion{Group: "certificates.k8s.io", Version: "v1beta1"}, Form: NativeForm}
	NativeV1alpha1 = API{GroupVersion: schema.GroupVersion{Group: "certificates.k8s.io", Version: "v1alpha1"}, Form: NativeForm}
	Mirror         = API{GroupVersion: schema.GroupVersion{Group: "trustsync.io", Version: "v1alpha1"}, Form: MirrorForm}

	nativeVersions = []API{NativeV1, NativeV1beta1, NativeV1alpha1}
)

// ResourceLister is the piece of client-go's discovery client that Discover needs.
type ResourceLister interface {
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// Served says which bundle APIs a cluster serves.
type Served struct {
	// Native is the newest served certificates.k8s.io version, or nil.
	Native *API
	// Mirror is true when the trustsync.io CRD is installed and served.
	Mirror bool
}

// APIs lists what is served, native first.
func (s Served) APIs() []API {
	var out []API
	if s.Native != nil {
		out = append(out, *s.Native)
	}
	if s.Mirror {
		out = append(out, Mirror)
	}
	return out
}

// Writer returns the API a writer publishes to: the native one when served, else the
// mirror. ok is false when neither is served.
func (s Served) Writer() (api API, ok bool) {
	apis := s.APIs()
	if len(apis) == 0 {
		return API{}, false
	}
	return apis[0], true
}

// Discover asks the API server which bundle APIs it serves: the newest native version
// (v1, then v1beta1, then v1alpha1) and the mirror CRD.
func Discover(lister ResourceLister) (Served, error) {
	var served Served
	for _, api := range nativeVersions {
		ok, err := serves(lister, api)
		if err != nil {
			return Served{}, err
		}
		if ok {
			served.Native = &api
			break
		}
	}
	ok, err := serves(lister, Mirror)
	if err != nil {
		return Served{}, err
	}
	served.Mirror = ok
	return served, nil
}

func serves(lister ResourceLister, api API) (bool, error) {
	list, err := lister.ServerResourcesForGroupVersion(api.GroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("failed to discover whether %s is served: %w", api, err)
	}
	for _, r := range list.APIResources {
		if r.Name == Resource {
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
