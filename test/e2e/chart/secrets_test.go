package chart

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

// With targets.authorizedSecrets, the controller runs with the chart's RBAC and its
// Deployment's own flags and may touch Secrets of those names alone: it writes a
// TrustTarget's Secret of an authorized name and fills an annotated one, refuses a
// TrustTarget naming another (SecretNotAuthorized, saying which names it may write),
// and can neither read nor list any other Secret of the cluster.
func TestChart_AuthorizedSecretsNarrowTheControllerToThoseNames(t *testing.T) {
	const rel, relNS = "narrow", "narrow-system"
	cp := planes.Get(t, true)
	ctx := context.Background()
	client := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	dyn := dynamic.NewForConfigOrDie(cp.AdminConfig())
	if err := cp.CreateNamespace(ctx, relNS, nil); err != nil {
		t.Fatal(err)
	}
	// Where no earlier test installed the release (and its CRDs).
	if err := cp.InstallTargetsCRD(ctx); err != nil {
		t.Fatal(err)
	}
	manifest := helm(t, "template", rel, "charts/trustsync", "-n", relNS, "--show-only", "templates/controller.yaml",
		"--set", "targets.secrets=true", "--set", "targets.authorizedSecrets={trust-roots,other-roots}")
	var rbac []byte
	var args []string
	for _, obj := range objects(t, manifest) {
		switch obj.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if obj.GetKind() == "ClusterRole" || obj.GetKind() == "ClusterRoleBinding" {
				t.Cleanup(func() {
					_ = dyn.Resource(rbacResource(obj.GetKind())).Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{})
				})
			}
			data, err := obj.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			rbac = append(append(rbac, data...), '\n')
		case "Deployment":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d); err != nil {
				t.Fatal(err)
			}
			args = d.Spec.Template.Spec.Containers[0].Args
		}
	}
	if !slices.Contains(args, "--targets-secret-names=trust-roots,other-roots") {
		t.Fatalf("the controller's Deployment passes %q; want the authorized names", args)
	}
	if _, err := controlplane.Apply(ctx, cp.AdminConfig(), rbac); err != nil {
		t.Fatal(err)
	}

	// The chart's flags, but for where it listens and what it reads with.
	port, _ := controlplane.FreePort()
	var flags []string
	for _, a := range args {
		if !strings.HasPrefix(a, "--health-bind-address=") {
			flags = append(flags, a)
		}
	}
	p := startFor(t, t, "controller", append(flags, "--kubeconfig="+serviceAccountKubeconfig(t, cp, relNS, rel+"-trustsync-controller"),
		"--namespace="+relNS, "--health-bind-address=127.0.0.1:"+strconv.Itoa(port), "--leader-elect-retry-period=500ms", "--federation=false")...)

	can := func(a authorizationv1.ResourceAttributes) bool {
		t.Helper()
		sar, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + relNS + ":" + rel + "-trustsync-controller", ResourceAttributes: &a}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	for _, a := range []authorizationv1.ResourceAttributes{
		{Verb: "get", Resource: "secrets", Namespace: "default", Name: "another"},
		{Verb: "list", Resource: "secrets"},
		{Verb: "create", Resource: "secrets", Namespace: "default"},
	} {
		if can(a) {
			t.Errorf("the controller may %s Secrets %q in %q though only trust-roots and other-roots are authorized", a.Verb, a.Name, a.Namespace)
		}
	}

	root := fixtures.CA("authorized secrets")
	if _, err := client.CertificatesV1().ClusterTrustBundles().Create(ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "narrow-roots"},
		Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: fixtures.Bundle(root)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CertificatesV1().ClusterTrustBundles().Delete(context.Background(), "narrow-roots", metav1.DeleteOptions{})
	})
	if err := cp.CreateNamespace(ctx, "narrow-apps", map[string]string{"trust": "narrow"}); err != nil {
		t.Fatal(err)
	}
	targets := dyn.Resource(v1alpha1.TrustTargetResource)
	target := func(name, secret string) {
		t.Helper()
		tt := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "trustsync.io/v1alpha1", "kind": v1alpha1.TrustTargetKind, "metadata": map[string]any{"name": name},
			"spec": map[string]any{"sources": []any{map[string]any{"name": "narrow-roots", "path": "ca.crt"}},
				"target": map[string]any{"secret": map[string]any{"name": secret}, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"trust": "narrow"}}}}}}
		if _, err := targets.Create(ctx, tt, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = targets.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	target("narrow-authorized", "trust-roots")
	target("narrow-refused", "unlisted-roots")
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"narrow-authorized", "narrow-refused"} {
				if u, err := targets.Get(context.Background(), name, metav1.GetOptions{}); err == nil {
					t.Logf("TrustTarget %s: %v", name, u.Object["status"])
				}
			}
		}
	})
	eventually(t, "the authorized Secret written by the controller as its ServiceAccount", p, func(ctx context.Context) (bool, error) {
		s, err := client.CoreV1().Secrets("narrow-apps").Get(ctx, "trust-roots", metav1.GetOptions{})
		return err == nil && string(s.Data["ca.crt"]) == string(root.CertPEM()), nil
	})
	var message string
	eventually(t, "the TrustTarget naming another Secret refused", p, func(ctx context.Context) (bool, error) {
		u, err := targets.Get(ctx, "narrow-refused", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Ready" && m["reason"] == v1alpha1.ReasonSecretNotAuthorized {
				message, _ = m["message"].(string)
				return true, nil
			}
		}
		return false, nil
	})
	if !strings.Contains(message, `Secret "unlisted-roots" is not one this controller may write: it may write Secrets named trust-roots, other-roots`) {
		t.Errorf("the refusal says %q", message)
	}
	if _, err := client.CoreV1().Secrets("narrow-apps").Get(ctx, "unlisted-roots", metav1.GetOptions{}); err == nil {
		t.Error("the unauthorized Secret was written")
	}

	// An annotated Secret of an authorized name is filled; one of another name is not
	// even seen.
	annotations := map[string]string{v1alpha1.AnnotationInject: "true", "trustsync.io/sources": `[{"name": "narrow-roots", "path": "ca.crt"}]`}
	for _, name := range []string{"other-roots", "unseen-roots"} {
		if _, err := client.CoreV1().Secrets("narrow-apps").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the annotated Secret of an authorized name filled", p, func(ctx context.Context) (bool, error) {
		s, err := client.CoreV1().Secrets("narrow-apps").Get(ctx, "other-roots", metav1.GetOptions{})
		return err == nil && string(s.Data["ca.crt"]) == string(root.CertPEM()), nil
	})
	if s, _ := client.CoreV1().Secrets("narrow-apps").Get(ctx, "unseen-roots", metav1.GetOptions{}); len(s.Data) != 0 {
		t.Errorf("the annotated Secret of an unauthorized name was filled: %v", s.Data)
	}
	if strings.Contains(p.Tail(), "forbidden") {
		t.Errorf("the controller was refused a request with the chart's RBAC:\n%s", p.Tail())
	}
}

// rbacResource is the resource of a cluster-wide RBAC kind.
func rbacResource(kind string) schema.GroupVersionResource {
	return rbacv1.SchemeGroupVersion.WithResource(strings.ToLower(kind) + "s")
}
