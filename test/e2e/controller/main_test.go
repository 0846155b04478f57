// Package controller tests trustsync-controller end to end: the real binary, with
// leader election, against a real kube-apiserver, keeping TrustTargets and annotated
// objects current from the bundles in the cluster, under TrustPolicies.
package controller

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/trustsync/trustsync/test/controlplane"
)

// controllerNamespace holds the controller's Lease and its index of annotated objects.
const controllerNamespace = "trustsync-system"

var (
	planes      = controlplane.Shared{Setup: setup}
	controllers = map[*controlplane.ControlPlane]*controlplane.Process{}
)

func TestMain(m *testing.M) { planes.Main(m) }

func setup(cp *controlplane.ControlPlane, native bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if !native {
		if err := cp.InstallMirrorCRD(ctx); err != nil {
			return err
		}
	}
	if err := cp.InstallReportsCRD(ctx); err != nil {
		return err
	}
	if err := cp.InstallTargetsCRD(ctx); err != nil {
		return err
	}
	if err := cp.CreateNamespace(ctx, controllerNamespace, nil); err != nil {
		return err
	}
	c, err := cp.StartController("--namespace=" + controllerNamespace)
	if err != nil {
		return err
	}
	controllers[cp] = c
	return nil
}

func kube(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
