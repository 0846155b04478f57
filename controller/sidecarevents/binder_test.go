package sidecarevents

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

const eventsRole = "trustsync-sidecar-events"

// newTestBinder is a Binder over a fake API holding objs, its caches filled.
func newTestBinder(t *testing.T, objs ...any) (*Binder, *fake.Clientset) {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: eventsRole, UID: types.UID("role-uid")}}
	client := fake.NewClientset(role)
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.Namespace:
			_, err = client.CoreV1().Namespaces().Create(context.Background(), o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = client.RbacV1().RoleBindings(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	b := New(client, factory, eventsRole, "trustsync-system")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory.Start(ctx.Done())
	b.start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), b.synced...) {
		t.Fatal("caches did not sync")
	}
	return b, client
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func TestEventsBinder_EachNamespacesServiceAccountsMayWriteEventsThereAlone(t *testing.T) {
	tenantGroup := []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:tenant-a"}}
	roleRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: eventsRole}
	for _, tc := range []struct {
		name      string
		ns        *corev1.Namespace
		existing  *rbacv1.RoleBinding
		wantBound bool
	}{
		{name: "a served namespace gets a binding for its own group", ns: namespace("tenant-a"), wantBound: true},
		{name: "kube-system gets none: the injector never serves it", ns: namespace("kube-system")},
		{name: "trustsync's own namespace gets none", ns: namespace("trustsync-system")},
		{name: "a terminating namespace gets none", ns: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-a"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}}},
		{name: "a binding widened to every ServiceAccount is narrowed back", ns: namespace("tenant-a"), wantBound: true,
			existing: &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: eventsRole, Namespace: "tenant-a"}, RoleRef: roleRef,
				Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts"}}}},
		{name: "a binding pointing at another role is replaced", ns: namespace("tenant-a"), wantBound: true,
			existing: &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: eventsRole, Namespace: "tenant-a"},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"}, Subjects: tenantGroup}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []any{tc.ns}
			if tc.existing != nil {
				objs = append(objs, tc.existing)
			}
			b, client := newTestBinder(t, objs...)
			if err := b.reconcile(context.Background(), tc.ns.Name); err != nil {
				t.Fatal(err)
			}
			got, err := client.RbacV1().RoleBindings(tc.ns.Name).Get(context.Background(), eventsRole, metav1.GetOptions{})
			if !tc.wantBound {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("binding %+v, err %v; want none", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + tc.ns.Name}}
			if got.RoleRef != roleRef || len(got.Subjects) != 1 || got.Subjects[0] != want[0] {
				t.Errorf("binding roleRef %+v subjects %+v; want %+v to %+v", got.RoleRef, got.Subjects, roleRef, want)
			}
			if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != "role-uid" || got.OwnerReferences[0].Kind != "ClusterRole" {
				t.Errorf("owners %+v; want the ClusterRole, so uninstalling removes every binding", got.OwnerReferences)
			}
		})
	}
}

func TestEventsBinder_WithoutItsClusterRoleSaysWhichAndWritesNothing(t *testing.T) {
	b, client := newTestBinder(t, namespace("tenant-a"))
	if err := client.RbacV1().ClusterRoles().Delete(context.Background(), eventsRole, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := b.reconcile(context.Background(), "tenant-a")
	if err == nil || !strings.Contains(err.Error(), `cannot read ClusterRole "trustsync-sidecar-events"`) {
		t.Fatalf("err = %v, want it to name the ClusterRole", err)
	}
	if list, _ := client.RbacV1().RoleBindings("tenant-a").List(context.Background(), metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("bindings written without an owner: %+v", list.Items)
	}
}

// A binding that is already what it should be costs no write, so restarting every
// replica over a thousand namespaces writes nothing.
func TestEventsBinder_LeavesARightBindingAlone(t *testing.T) {
	right := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: eventsRole, Namespace: "tenant-a",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: eventsRole, UID: "role-uid"}}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: eventsRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:tenant-a"}},
	}
	b, client := newTestBinder(t, namespace("tenant-a"), right)
	before := len(client.Actions())
	if err := b.reconcile(context.Background(), "tenant-a"); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions()[before:] {
		if a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("reconciling a right binding made a %s of %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}
