// Package sidecar tests trustsync-sidecar end to end: the real binary, run as a process
// with an unprivileged ServiceAccount's token, against a real kube-apiserver.
package sidecar

import (
	"context"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

var planes = controlplane.Shared{Setup: setup}

func TestMain(m *testing.M) { planes.Main(m) }

const namespace = "apps"

// setup installs the mirror CRD (in native mode too: readers take the union) and the
// sidecar's RBAC for the ServiceAccount apps/web, as docs/sidecar.md lists it.
func setup(cp *controlplane.ControlPlane, _ bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cp.InstallMirrorCRD(ctx); err != nil {
		return err
	}
	return setupIdentities(ctx, cp)
}

// setupIdentities creates the namespace, the ServiceAccounts and their RBAC.
func setupIdentities(ctx context.Context, cp *controlplane.ControlPlane) error {
	if err := cp.CreateNamespace(ctx, namespace, nil); err != nil {
		return err
	}
	for _, sa := range []string{"web", "quiet"} {
		if err := cp.CreateServiceAccount(ctx, namespace, sa); err != nil {
			return err
		}
	}
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	// "web" has what docs/sidecar.md lists; "quiet" may read bundles but not record Events.
	sa := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "web", Namespace: namespace}}
	readers := append(sa, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "quiet", Namespace: namespace})
	objects := []func() error{
		func() error {
			_, err := client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "trustsync-bundle-reader"}, Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{"certificates.k8s.io", "trustsync.io"}, Resources: []string{"clustertrustbundles"}, Verbs: []string{"get", "list", "watch"},
			}}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "web-reads-bundles"},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "trustsync-bundle-reader"}, Subjects: readers}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := client.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "web-trust-sources"}, Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"extra-cas"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"partner-tls", "store-pass"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := client.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "web-trust-sources"},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "web-trust-sources"}, Subjects: sa}, metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range objects {
		if err := create(); err != nil {
			return err
		}
	}
	return nil
}

// podFor creates the pod the sidecar reports Events on.
func podFor(t testing.TB, cp *controlplane.ControlPlane, name string) *corev1.Pod {
	t.Helper()
	pod, err := kube(t, cp).CoreV1().Pods(namespace).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{ServiceAccountName: "web", Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// runSidecar starts `trustsync-sidecar <sub>` as ServiceAccount apps/web for pod.
func runSidecar(t testing.TB, cp *controlplane.ControlPlane, sub string, pod *corev1.Pod, sourcesJSON string, extra ...string) *controlplane.Sidecar {
	t.Helper()
	return runSidecarAs(t, cp, "web", sub, pod, sourcesJSON, extra...)
}

// runSidecarAs starts the sidecar as ServiceAccount apps/<sa>.
func runSidecarAs(t testing.TB, cp *controlplane.ControlPlane, sa, sub string, pod *corev1.Pod, sourcesJSON string, extra ...string) *controlplane.Sidecar {
	t.Helper()
	return cp.StartSidecar(t, namespace, sa, pod, append([]string{sub, contract.Flag(contract.FlagSources, sourcesJSON)}, extra...)...)
}

// merged is the exact file the sidecar must write for these anchors.
func merged(anchors ...*fixtures.Cert) []byte {
	p := bundle.NewPool()
	for _, a := range anchors {
		p.AddDER(a.Cert.Raw)
	}
	return p.PEM()
}

func kube(t testing.TB, cp *controlplane.ControlPlane) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func stores(t testing.TB, cp *controlplane.ControlPlane, native bool) (primary, mirror *bundleapi.Store) {
	t.Helper()
	c, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	mirror = bundleapi.NewStore(c, bundle.Mirror)
	if native {
		return bundleapi.NewStore(c, bundle.NativeV1), mirror
	}
	return mirror, mirror
}

func ctb(name, signer string, labels map[string]string, anchors ...*fixtures.Cert) *certificatesv1.ClusterTrustBundle {
	return &certificatesv1.ClusterTrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: fixtures.Bundle(anchors...)},
	}
}

// eventsFor lists the Events recorded on pod with reason.
func eventsFor(t testing.TB, cp *controlplane.ControlPlane, pod *corev1.Pod, reason string) []corev1.Event {
	t.Helper()
	list, err := kube(t, cp).CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(pod.UID) + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func mode(native bool) string {
	if native {
		return "native"
	}
	return "no-native"
}

func uniq(t *testing.T, prefix string) string {
	return strings.ToLower(prefix + "-" + strings.ReplaceAll(strings.ReplaceAll(t.Name(), "/", "-"), "_", "-"))
}
