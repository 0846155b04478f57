package chart

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/test/poll"
)

// noFixedIDs is what OpenShift's restricted-v2 SCC asks of a pod, as a
// ValidatingAdmissionPolicy: no UID, GID or fsGroup of its own choosing, since the
// platform assigns each namespace's. Bound to the namespaces labelled assigns-ids.
var noFixedIDs = &admissionregistrationv1.ValidatingAdmissionPolicy{
	ObjectMeta: metav1.ObjectMeta{Name: "e2e-no-fixed-ids"},
	Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			},
		}}},
		Validations: []admissionregistrationv1.Validation{{
			Expression: `!has(object.spec.securityContext) || (!has(object.spec.securityContext.runAsUser) && !has(object.spec.securityContext.runAsGroup) && !has(object.spec.securityContext.fsGroup))`,
			Message:    "the pod fixes its UID, GID or fsGroup, which this platform assigns",
		}, {
			Expression: `object.spec.containers.all(c, !has(c.securityContext) || (!has(c.securityContext.runAsUser) && !has(c.securityContext.runAsGroup)))`,
			Message:    "a container fixes its UID or GID, which this platform assigns",
		}},
	},
}

// On a platform that assigns UIDs and groups itself (OpenShift), the chart installs
// with docs/examples/openshift-values.yaml: the pods of every workload but the
// privileged agent (which needs the privileged SCC there) pass a policy refusing
// fixed IDs, created through a real API server as their controllers would create
// them. With the defaults, the same policy refuses them: the test can fail.
func TestChart_InstallsWhereThePlatformAssignsUIDs(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	namespace := "e2e-assigns-ids"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{"assigns-ids": "true"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(context.Background(), namespace, metav1.DeleteOptions{})
	})
	policies := client.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	if _, err := policies.Create(ctx, noFixedIDs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = policies.Delete(context.Background(), noFixedIDs.Name, metav1.DeleteOptions{}) })
	bindings := client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	if _, err := bindings.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: noFixedIDs.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        noFixedIDs.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"assigns-ids": "true"}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bindings.Delete(context.Background(), noFixedIDs.Name, metav1.DeleteOptions{}) })
	// The API server loads a policy and its binding a moment after they are written.
	if _, err := client.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}, Spec: corev1.PodSpec{
		ServiceAccountName: "probe",
		SecurityContext:    &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1)},
		Containers:         []corev1.Container{{Name: "c", Image: "probe"}},
	}}
	poll.Eventually(t, 30*time.Second, "the policy in force", func() (bool, string) {
		_, err := client.CoreV1().Pods(namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "which this platform assigns"), fmt.Sprintf("a fixed UID: %v", err)
	})

	for _, tc := range []struct {
		name    string
		args    []string
		refused bool
	}{
		{"the defaults are refused", nil, true},
		{"docs/examples/openshift-values.yaml is admitted", []string{"-f", "docs/examples/openshift-values.yaml"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := workloads(t, objects(t, helm(t, append([]string{"template", release, "charts/trustsync", "-n", namespace}, tc.args...)...)))
			for component, tmpl := range w {
				if component == "agent" {
					continue
				}
				sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tmpl.Spec.ServiceAccountName}}
				if _, err := client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
					t.Fatal(err)
				}
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: component + "-", Labels: tmpl.Labels}, Spec: tmpl.Spec}
				created, err := client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				switch {
				case tc.refused && (err == nil || !strings.Contains(err.Error(), "which this platform assigns")):
					t.Errorf("%s: %v; want it refused for its fixed IDs", component, err)
				case !tc.refused && err != nil:
					t.Errorf("%s: %v", component, err)
				case !tc.refused && (created.Spec.SecurityContext == nil || created.Spec.SecurityContext.RunAsNonRoot == nil || !*created.Spec.SecurityContext.RunAsNonRoot):
					t.Errorf("%s admitted without runAsNonRoot: the image's non-root user must still be required", component)
				}
			}
		})
	}
}
