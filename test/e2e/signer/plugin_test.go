package signer

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/cmd/kubectl-trustsync/plugin"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/poll"
)

// kubectl trustsync completes from the cluster, with the user's kubeconfig, what each
// word may be: -n a namespace, rotation a signer whose bundle says where its rotation
// stands, who-trusts an anchor a bundle holds (described by its name and bundle, files
// still offered), federation a peer by name or trust domain. It prints -o name, wide
// and jsonpath as kubectl get does.
func TestPlugin_CompletesFromTheClusterAndPrintsAsKubectlDoes(t *testing.T) {
	const namespace, signer = "completion-signer", "example.com/completion"
	cp := planes.Get(t, true)
	ctx := context.Background()
	startObservedSigner(t, cp, namespace, signer)
	cli := controlplane.NewPlugin(t, cp)
	var r plugin.Rotation
	rotation := signerRotation(t, cli, signer, &r)
	poll.True(t, time.Minute, "the signer's live bundle, Stable", func() bool { return rotation() == 0 && r.Phase == "Stable" })

	if err := cp.InstallFederationCRD(ctx); err != nil {
		t.Fatal(err)
	}
	const peerName, peerDomain = "completion-peer", "completion.example"
	ftd := &v1alpha1.FederatedTrustDomain{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.FederatedTrustDomainResource.GroupVersion().String(), Kind: v1alpha1.FederatedTrustDomainKind},
		ObjectMeta: metav1.ObjectMeta{Name: peerName},
		Spec: v1alpha1.FederatedTrustDomainSpec{TrustDomain: peerDomain, BundleEndpointURL: "https://127.0.0.1:1/bundle",
			BundleEndpointProfile: v1alpha1.BundleEndpointProfile{Type: v1alpha1.ProfileWeb}},
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ftd)
	if err != nil {
		t.Fatal(err)
	}
	ftds := dynamic.NewForConfigOrDie(cp.AdminConfig()).Resource(v1alpha1.FederatedTrustDomainResource)
	if _, err := ftds.Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ftds.Delete(context.Background(), peerName, metav1.DeleteOptions{}) })

	const noFiles, files = ":4", ":0"
	for _, tc := range []struct {
		name      string
		args      []string
		offers    string
		directive string
	}{
		{"-n offers the namespaces starting with the word", []string{"status", "-n", "completion-"}, namespace, noFiles},
		{"rotation offers the signers with a rotation", []string{"rotation", "example.com/"}, signer, noFiles},
		{"who-trusts offers each anchor with its name and bundle, and files", []string{"who-trusts", ""}, r.CurrentCA + "\t", files},
		{"federation offers a peer by name", []string{"federation", "completion-"}, peerName, noFiles},
		{"federation offers a peer by trust domain", []string{"federation", "completion."}, peerDomain, noFiles},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values, directive := cli.Complete(t, tc.args...)
			if directive != tc.directive || !slices.ContainsFunc(values, func(v string) bool { return strings.HasPrefix(v, tc.offers) }) {
				t.Errorf("%v offers %q (directive %s); want %q among them (directive %s)", tc.args, values, directive, tc.offers, tc.directive)
			}
			last := tc.args[len(tc.args)-1]
			for _, v := range values {
				if !strings.HasPrefix(v, last) {
					t.Errorf("%v offers %q, which does not start with %q", tc.args, v, last)
				}
			}
		})
	}

	for _, tc := range []struct {
		name string
		args []string
		want *regexp.Regexp
	}{
		{"jsonpath reads rotation's JSON", []string{"rotation", signer, "-o", "jsonpath={.currentCA}"}, regexp.MustCompile(`^` + r.CurrentCA + `$`)},
		{"name prints the peers as kubectl does", []string{"federation", "-o", "name"}, regexp.MustCompile(`(?m)^federatedtrustdomain\.trustsync\.io/` + peerName + `$`)},
		{"wide adds the endpoint", []string{"federation", peerName, "-o", "wide"}, regexp.MustCompile(`(?m)^NAME .* ENDPOINT +BUNDLE\n` + peerName + ` .* https://127\.0\.0\.1:1/bundle`)},
		// In the signer's namespace, where no pod runs (other tests' pods elsewhere
		// may not be seen).
		{"wide prints the whole SHA-256", []string{"who-trusts", r.CurrentCA, "-n", namespace, "-o", "wide"}, regexp.MustCompile(`(?m)^` + r.CurrentCA + ` +\(no pod or object holds it\)`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, _ := cli.Output(t, tc.args...)
			if !tc.want.MatchString(stdout) {
				t.Errorf("%v printed\n%s\n(stderr %s); want %s", tc.args, stdout, stderr, tc.want)
			}
		})
	}
}
