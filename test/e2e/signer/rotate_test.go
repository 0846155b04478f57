package signer

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/cmd/kubectl-trustsync/plugin"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/poll"
)

// kubectl trustsync rotate asks the signer named for a rotation on the CA Secret its
// live bundle names, and does not ask twice; rotation then exits 3 while the rotation
// waits, though no pod lacks the new CA (there is none); rotate --wait exits 3 when
// the new CA does not sign in time, and 0 once it does. A user without patch on the
// Secret is told which right it takes; no Secret changes.
func TestPlugin_RotateAsksOnceAndWaitsUntilTheNewCASigns(t *testing.T) {
	const namespace, signer = "rotate-signer", "example.com/rotate"
	cp := planes.Get(t, true)
	ctx := context.Background()
	// A timed rotation of a minute: long enough to see it wait, short enough to end.
	startObservedSigner(t, cp, namespace, signer, "--ca-propagation=timed", "--ca-propagation-window=40s")
	cli := controlplane.NewPlugin(t, cp)
	var r plugin.Rotation
	poll.True(t, time.Minute, "the signer's live bundle, Stable", func() bool {
		out, code := cli.Run(t, "rotation", signer, "-o", "json")
		return code == 0 && strings.Contains(out, `"phase": "Stable"`)
	})
	cli.JSON(t, &r, 0, "rotation", signer)
	secretName := "trustsync-ca-" + strings.ReplaceAll(signer, "/", "-")
	if r.CASecret != namespace+"/"+secretName {
		t.Fatalf("the live bundle names CA Secret %q, want %s/%s", r.CASecret, namespace, secretName)
	}
	oldCA := r.CurrentCA

	// Without patch on the Secret: refused, naming the right, nothing written.
	viewer := controlplane.NewPluginAs(t, cp.UserConfig("e2e-rotate-viewer", "system:authenticated"))
	bindView(t, cp, "e2e-rotate-viewer")
	out, code := viewer.Run(t, "rotate", signer)
	if code != plugin.ExitError || !strings.Contains(out, "it needs patch on that Secret") {
		t.Errorf("rotate without the right: exit %d, %s", code, out)
	}
	secret, err := kube(t, cp.AdminConfig()).CoreV1().Secrets(namespace).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, asked := secret.Annotations["trustsync.io/rotate-requested-at"]; asked {
		t.Fatal("a refused rotate annotated the CA Secret")
	}

	out, code = cli.Run(t, "rotate", signer)
	if code != 0 || !strings.Contains(out, "Asked "+signer+" for a new CA (annotated Secret "+namespace+"/"+secretName+")") {
		t.Fatalf("rotate: exit %d, %s", code, out)
	}
	poll.True(t, time.Minute, "the new CA waiting", func() bool {
		out, code := cli.Run(t, "rotation", signer, "-o", "json")
		return code == plugin.ExitNotAll && strings.Contains(out, `"phase": "Waiting"`)
	})
	cli.JSON(t, &r, plugin.ExitNotAll, "rotation", signer)
	if r.Expected != 0 || r.NewCA == "" {
		t.Errorf("a rotation waiting with no pod to wait for: %+v; want exit 3 all the same", r)
	}
	out, code = cli.Run(t, "rotate", signer)
	if code != 0 || !strings.Contains(out, "under way already") {
		t.Errorf("rotate during a rotation: exit %d, %s; want it not asked again", code, out)
	}
	out, code = cli.Run(t, "rotate", signer, "--wait", "2s")
	if code != plugin.ExitNotAll || !strings.Contains(out, "Still Waiting after 2s") {
		t.Errorf("rotate --wait 2s with the window at 40s: exit %d, %s", code, out)
	}
	out, code = cli.Run(t, "rotate", signer, "--wait", "2m")
	if code != 0 || !strings.Contains(out, "The new CA "+r.NewCA+" signs now.") {
		t.Fatalf("rotate --wait 2m: exit %d, %s", code, out)
	}
	cli.JSON(t, &r, 0, "rotation", signer)
	if r.Phase != "Stable" || r.CurrentCA == oldCA {
		t.Errorf("after rotate --wait: %+v", r)
	}

	out, code = cli.Run(t, "rotate", "example.com/no-such-signer")
	if code != plugin.ExitError || !strings.Contains(out, "no live bundle of trustsync's signer example.com/no-such-signer") {
		t.Errorf("rotate of an unknown signer: exit %d, %s", code, out)
	}
}

// bindView lets user read bundles of both APIs, as the chart's view aggregation does,
// and nothing else.
func bindView(t *testing.T, cp *controlplane.ControlPlane, user string) {
	t.Helper()
	ctx := context.Background()
	rbac := kube(t, cp.AdminConfig()).RbacV1()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"certificates.k8s.io", "trustsync.io"}, Resources: []string{"clustertrustbundles"}, Verbs: []string{"get", "list", "watch"},
	}}}
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rbac.ClusterRoleBindings().Delete(context.Background(), user, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(context.Background(), user, metav1.DeleteOptions{})
	})
}
