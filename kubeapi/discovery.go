package kubeapi

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
)

// ResourceLister is the one discovery call trustsync makes: client-go's discovery
// client has it, and so does RESTResourceLister.
type ResourceLister interface {
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// ServedResources is the one answer to "which resources of groupVersion does the API
// server serve": none, without an error, when it serves no such group version (its
// 404); an error naming the group version when it cannot say, so that a caller never
// takes an outage for "not served".
func ServedResources(lister ResourceLister, groupVersion string) (sets.Set[string], error) {
	return servedResources(lister, groupVersion, groupVersion)
}

// servedResources is ServedResources, its error naming what the caller asked about.
func servedResources(lister ResourceLister, groupVersion, asked string) (sets.Set[string], error) {
	list, err := lister.ServerResourcesForGroupVersion(groupVersion)
	if apierrors.IsNotFound(err) {
		return sets.New[string](), nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to discover whether the API server serves %s: %w", asked, err)
	}
	served := sets.New[string]()
	for _, r := range list.APIResources {
		served.Insert(r.Name)
	}
	return served, nil
}

// Serves says whether the API server serves resource (see ServedResources); an error
// names it as kubectl does, resource.version.group.
func Serves(lister ResourceLister, resource schema.GroupVersionResource) (bool, error) {
	asked := resource.Resource + "." + resource.Version + "." + resource.Group
	served, err := servedResources(lister, resource.GroupVersion().String(), asked)
	if err != nil {
		return false, err
	}
	return served.Has(resource.Resource), nil
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
