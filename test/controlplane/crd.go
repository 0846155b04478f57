package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/yaml"
)

// MirrorCRDPath returns the path of the mirror CRD: the chart's copy, the only one.
func MirrorCRDPath() (string, error) { return chartCRDPath("clustertrustbundles.trustsync.io.yaml") }

func chartCRDPath(file string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "charts", "trustsync", "files", "crds", file), nil
}

// InstallMirrorCRD installs the mirror CRD and waits until it is established and its
// resource is discoverable.
func (cp *ControlPlane) InstallMirrorCRD(ctx context.Context) error {
	path, err := MirrorCRDPath()
	if err != nil {
		return err
	}
	return cp.installCRD(ctx, path)
}

// InstallReportsCRD installs the chart's NodeTrustReport CRD and waits until it is
// served.
func (cp *ControlPlane) InstallReportsCRD(ctx context.Context) error {
	path, err := chartCRDPath("nodetrustreports.trustsync.io.yaml")
	if err != nil {
		return err
	}
	return cp.installCRD(ctx, path)
}

// InstallTargetsCRD installs the chart's TrustTarget CRD and waits until it is
// served.
func (cp *ControlPlane) InstallTargetsCRD(ctx context.Context) error {
	path, err := chartCRDPath("trusttargets.trustsync.io.yaml")
	if err != nil {
		return err
	}
	return cp.installCRD(ctx, path)
}

func (cp *ControlPlane) installCRD(ctx context.Context, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return fmt.Errorf("failed to parse %s: %w", path, err)
	}
	client, err := apiextensionsclient.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create CRD %s: %w", crd.Name, err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	gv := crd.Spec.Group + "/" + crd.Spec.Versions[0].Name
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		established := false
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		if !established {
			return false, nil
		}
		resources, err := dc.ServerResourcesForGroupVersion(gv)
		if err != nil {
			return false, nil
		}
		for _, r := range resources.APIResources {
			if r.Name == crd.Spec.Names.Plural {
				return true, nil
			}
		}
		return false, nil
	})
}

// UninstallMirrorCRD deletes the mirror CRD (and so every mirror object) and waits
// until its resource is no longer discoverable.
func (cp *ControlPlane) UninstallMirrorCRD(ctx context.Context) error {
	client, err := apiextensionsclient.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	if err := client.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, "clustertrustbundles.trustsync.io", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := dc.ServerResourcesForGroupVersion("trustsync.io/v1alpha1")
		return apierrors.IsNotFound(err), nil
	})
}

// InstallFederationCRD installs the chart's FederatedTrustDomain CRD and waits until it
// is served.
func (cp *ControlPlane) InstallFederationCRD(ctx context.Context) error {
	path, err := chartCRDPath("federatedtrustdomains.trustsync.io.yaml")
	if err != nil {
		return err
	}
	return cp.installCRD(ctx, path)
}

// InstallPoliciesCRD installs the chart's TrustPolicy CRD and waits until it is
// served.
func (cp *ControlPlane) InstallPoliciesCRD(ctx context.Context) error {
	path, err := chartCRDPath("trustpolicies.trustsync.io.yaml")
	if err != nil {
		return err
	}
	return cp.installCRD(ctx, path)
}

// InstallCRD installs the CRD in the YAML file at path (one a test brings, such as
// another project's) and waits until it is served.
func (cp *ControlPlane) InstallCRD(ctx context.Context, path string) error {
	return cp.installCRD(ctx, path)
}
