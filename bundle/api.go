package bundle

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
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

	// NativeAPIs are the native versions, newest first: the order discovery prefers.
	NativeAPIs = []API{NativeV1, NativeV1beta1, NativeV1alpha1}
)

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
