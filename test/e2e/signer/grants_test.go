package signer

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/cmd/kubectl-trustsync/plugin"
	"github.com/trustsync/trustsync/test/controlplane"
)

// docsYAML is the YAML block of docs/tenancy.md that contains marker, as written.
func docsYAML(t *testing.T, marker string) []byte {
	t.Helper()
	data, err := os.ReadFile("../../../docs/tenancy.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		if strings.Contains(b[1], marker) {
			return []byte(b[1])
		}
	}
	t.Fatalf("docs/tenancy.md has no YAML block with %q", marker)
	return nil
}

// docs/tenancy.md's worked example, applied as written: a tenant of payments, with the
// reader RBAC and the Role the page gives, asks what it is granted
// and gets every grant with its policy; it may not write a policy; and an invalid
// policy is named, granting nothing.
func TestGrants_ATenantReadsItsGrantsAsDocsTenancyTeaches(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := controlplane.Context(t)
	if err := cp.InstallPoliciesCRD(ctx); err != nil {
		t.Fatal(err)
	}
	admin := cp.AdminConfig()
	policies := docsYAML(t, "name: everyone")
	if _, err := controlplane.Apply(ctx, admin, policies); err != nil {
		t.Fatalf("the worked example does not apply: %v", err)
	}
	if _, err := controlplane.Apply(ctx, admin, docsYAML(t, "name: trustsync-policy-reader")); err != nil {
		t.Fatalf("the reader RBAC does not apply: %v", err)
	}
	dyn := dynamic.NewForConfigOrDie(admin).Resource(v1alpha1.TrustPolicyResource)
	t.Cleanup(func() {
		for _, n := range []string{"everyone", "payments", "search", "ledger", "broken"} {
			_ = dyn.Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})
	if err := cp.CreateNamespace(ctx, "payments-api", map[string]string{"team": "payments"}); err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.Apply(ctx, admin, docsYAML(t, "name: read-own-namespace")); err != nil {
		t.Fatalf("the tenant's Role does not apply: %v", err)
	}
	tenant := cp.UserConfig("payments-dev", "payments-developers")
	cli := controlplane.NewPluginAs(t, tenant)

	var got plugin.NamespaceGrants
	cli.JSON(t, &got, 0, "grants", "-n", "payments-api")
	want := []string{"trust bundle corp-root by everyone", "trust signer trustsync.io/workload [] by payments", "trust domain partner.example by payments",
		"ask trustsync.io/workload for [*.payments.svc *.payments.svc.cluster.local] by payments"}
	var said []string
	for _, b := range got.Bundles {
		switch {
		case b.Name != "":
			said = append(said, "trust bundle "+b.Name+" by "+b.Policy)
		case b.TrustDomain != "":
			said = append(said, "trust domain "+b.TrustDomain+" by "+b.Policy)
		default:
			said = append(said, "trust signer "+b.SignerName+" ["+b.LabelSelector+"] by "+b.Policy)
		}
	}
	for _, s := range got.Signers {
		said = append(said, "ask "+s.SignerName+" for ["+strings.Join(s.DNSNames, " ")+"] by "+s.Policy)
	}
	if got.Namespace != "payments-api" || strings.Join(said, "\n") != strings.Join(want, "\n") {
		t.Errorf("grants -n payments-api says\n%s\nwant\n%s", strings.Join(said, "\n"), strings.Join(want, "\n"))
	}
	table, code := cli.Run(t, "grants", "-n", "payments-api")
	if code != 0 || !regexp.MustCompile(`payments-api +trust +trust domain partner.example's anchors +payments`).MatchString(table) ||
		!strings.Contains(table, "Always allowed: the namespace's own ConfigMap and Secret sources") {
		t.Errorf("the table (exit %d):\n%s", code, table)
	}

	// A namespace that does not exist is said, not answered with nothing granted.
	if out, code := controlplane.NewPlugin(t, cp).Run(t, "grants", "-n", "no-such-namespace"); code != plugin.ExitError || !strings.Contains(out, `read namespace no-such-namespace, whose labels the policies select: namespaces "no-such-namespace" not found`) {
		t.Errorf("grants of a missing namespace: exit %d, %s", code, out)
	}

	// A tenant reads policies; it does not write them.
	broken := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "trustsync.io/v1alpha1", "kind": "TrustPolicy", "metadata": map[string]any{"name": "broken"},
		"spec": map[string]any{"namespaceSelector": map[string]any{}, "bundles": []any{map[string]any{"trustDomain": "Partner.Example"}}}}}
	if _, err := dynamic.NewForConfigOrDie(tenant).Resource(v1alpha1.TrustPolicyResource).Create(ctx, broken, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a tenant created a TrustPolicy: %v", err)
	}
	// One the schema lets through and Go refuses grants nothing, and is named.
	if _, err := dyn.Create(ctx, broken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := cli.Output(t, "grants", "-n", "payments-api", "-o", "json")
	if code != 0 || !strings.Contains(stderr, `warning: TrustPolicy broken grants nothing, its spec is invalid: spec.bundles[0].trustDomain: Invalid value: "Partner.Example"`) ||
		strings.Contains(stdout, "broken") {
		t.Errorf("with an invalid policy (exit %d): stdout %s\nstderr %s", code, stdout, stderr)
	}
}
