// Package sidecarevents keeps, in every namespace the injector serves, the RoleBinding
// that lets that namespace's sidecars record Events about their pods there and
// nowhere else.
package sidecarevents

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/kubeapi/queue"
)

// Binder lets each namespace's sidecars record Events about their pods in that
// namespace and nowhere else. RBAC cannot bind a role to "a ServiceAccount, in its own
// namespace" for every ServiceAccount at once: a ClusterRoleBinding to the group
// system:serviceaccounts would let any tenant forge Events in kube-system or another
// team's namespace. So the controller keeps, in every namespace its injector serves, a
// RoleBinding of the sidecar's events ClusterRole to that namespace's group
// (system:serviceaccounts:<namespace>), as the namespace appears; the namespace's
// deletion takes the binding with it, and the ClusterRole's (an owner reference) takes
// them all when the chart is uninstalled.
//
// It is the controller's, not the webhook's: the webhook, which any pod can reach,
// then holds no right to create RoleBindings or bind a role. It runs while the
// controller holds its Lease; its writes are idempotent either way (create,
// AlreadyExists is done).
type Binder struct {
	client kubernetes.Interface
	// role names both the ClusterRole and the RoleBinding kept in each namespace.
	role string
	// injector says which namespaces the injector serves.
	injector   injector.Config
	namespaces corelisters.NamespaceLister
	bindings   rbaclisters.RoleBindingLister
	synced     []cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[string]
	start      func(stop <-chan struct{})
}

// managedByLabel marks the bindings trustsync keeps.
const managedByLabel = "app.kubernetes.io/managed-by"

// New keeps the bindings of role, the ClusterRole letting sidecars record Events (and
// the name of every binding); ownNamespace, trustsync's, gets none, as the injector
// serves none of its pods. It watches namespaces through factory, started by its
// owner, and, with a watch of its own, only the bindings named role.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, role, ownNamespace string) *Binder {
	bindingsFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		// RBAC authorizes a list or watch by name against resourceNames, so the
		// controller needs no right to read other bindings.
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", role).String()
	}))
	nsInformer := factory.Core().V1().Namespaces()
	rbInformer := bindingsFactory.Rbac().V1().RoleBindings()
	b := &Binder{
		client: client, role: role, injector: injector.Config{Namespace: ownNamespace},
		namespaces: nsInformer.Lister(), bindings: rbInformer.Lister(),
		synced: []cache.InformerSynced{nsInformer.Informer().HasSynced, rbInformer.Informer().HasSynced},
		queue:  queue.New[string]("trustsync_sidecar_events_bindings"),
	}
	enqueue := func(obj any) {
		if o, ok := obj.(metav1.Object); ok {
			ns := o.GetNamespace()
			if ns == "" {
				ns = o.GetName() // a Namespace
			}
			b.queue.Add(ns)
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		enqueue(obj)
	}}
	_, _ = nsInformer.Informer().AddEventHandler(handler)
	_, _ = rbInformer.Informer().AddEventHandler(handler)
	b.start = bindingsFactory.Start
	return b
}

// Run reconciles until ctx is done; factory is started by its owner.
func (b *Binder) Run(ctx context.Context) {
	defer b.queue.ShutDown()
	b.start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), b.synced...) {
		return
	}
	klog.InfoS("Keeping sidecar Event bindings in every served namespace", "clusterRole", b.role)
	queue.Work(ctx, b.queue, 1, "namespace", func(ctx context.Context, ns string) (time.Duration, error) {
		if err := b.reconcile(ctx, ns); err != nil {
			return 0, fmt.Errorf("cannot keep the sidecar Event binding in namespace %s: %w", ns, err)
		}
		return 0, nil
	})
	<-ctx.Done()
}

// served reports whether the injector may put sidecars into pods of namespace ns.
func (b *Binder) served(ns *corev1.Namespace) bool {
	return b.injector.NamespaceSkipped(ns.Name) == "" && ns.Status.Phase != corev1.NamespaceTerminating
}

// reconcile makes namespace ns hold exactly the binding it should.
func (b *Binder) reconcile(ctx context.Context, ns string) error {
	namespace, err := b.namespaces.Get(ns)
	if apierrors.IsNotFound(err) {
		return nil // its bindings go with it
	}
	if err != nil {
		return err
	}
	existing, err := b.bindings.RoleBindings(ns).Get(b.role)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if !b.served(namespace) {
		return nil
	}
	want := b.binding(ns)
	if existing != nil && existing.RoleRef == want.RoleRef && slices.Equal(existing.Subjects, want.Subjects) && ownedByRole(existing, b.role) {
		return nil
	}
	// Read the owner afresh for every write: a ClusterRole deleted and made again has
	// a new UID, and a binding owned by the old one would be collected.
	owner, err := b.clusterRoleOwner(ctx)
	if err != nil {
		return err
	}
	want.OwnerReferences = []metav1.OwnerReference{*owner}
	bindings := b.client.RbacV1().RoleBindings(ns)
	switch {
	case existing == nil:
		_, err := bindings.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // another replica, or the cache is behind: the watch brings it
		}
		if err == nil {
			klog.V(2).InfoS("Bound the sidecar's Event role in a namespace", "namespace", ns, "group", want.Subjects[0].Name)
		}
		return err
	case existing.RoleRef != want.RoleRef:
		// roleRef is immutable: replace the binding.
		if err := bindings.Delete(ctx, b.role, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &existing.UID}}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		_, err := bindings.Create(ctx, want, metav1.CreateOptions{})
		return err
	default:
		// Someone widened (or narrowed) it: only the namespace's own group belongs.
		updated := existing.DeepCopy()
		updated.Subjects, updated.OwnerReferences = want.Subjects, want.OwnerReferences
		_, err := bindings.Update(ctx, updated, metav1.UpdateOptions{})
		return err
	}
}

// ownedByRole reports whether the ClusterRole named role owns o.
func ownedByRole(o metav1.Object, role string) bool {
	return slices.ContainsFunc(o.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.Kind == "ClusterRole" && r.Name == role })
}

// binding is the RoleBinding namespace ns should hold.
func (b *Binder) binding(ns string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name: b.role, Namespace: ns,
			Labels: map[string]string{managedByLabel: "trustsync-controller"},
		},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns}},
	}
}

// clusterRoleOwner makes the ClusterRole the owner of every binding, so that deleting
// it (helm uninstall) lets the garbage collector remove them.
func (b *Binder) clusterRoleOwner(ctx context.Context) (*metav1.OwnerReference, error) {
	role, err := b.client.RbacV1().ClusterRoles().Get(ctx, b.role, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("cannot read ClusterRole %q, the sidecar's Event role that --sidecar-events-cluster-role names (the chart installs it with sidecarRBAC.events): %w", b.role, err)
	}
	return &metav1.OwnerReference{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: role.Name, UID: role.UID}, nil
}
