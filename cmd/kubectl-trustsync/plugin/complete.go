package plugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
)

// completionTimeout bounds the reads behind one <TAB>: a shell waits on it, and an
// unreachable cluster must cost a moment, not client-go's default minute of retries.
const completionTimeout = 5 * time.Second

// completer lists what a word may be, read from the cluster with the user's
// kubeconfig (as kubectl's own completion does). A read that fails completes nothing:
// the shell has no place for an error.
type completer func(ctx context.Context, c clients) ([]string, error)

// complete turns a completer into cobra's: values starting with the word typed, for
// the first argument alone (onlyFirstArg) or for a flag; files also offers the
// shell's file names.
func (o *options) complete(list completer, files, onlyFirstArg bool) cobra.CompletionFunc {
	directive := cobra.ShellCompDirectiveNoFileComp
	if files {
		directive = cobra.ShellCompDirectiveDefault
	}
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if onlyFirstArg && len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := o.clients()
		if err != nil {
			return nil, directive
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		values, err := list(ctx, c)
		if err != nil {
			cobra.CompDebugln(err.Error(), false) // to BASH_COMP_DEBUG_FILE, where set
			return nil, directive
		}
		var out, seen []string
		for _, v := range values {
			// A value may carry a description after a tab; it is offered once.
			value, _, _ := strings.Cut(v, "\t")
			if strings.HasPrefix(value, toComplete) && !slices.Contains(seen, value) {
				seen = append(seen, value)
				out = append(out, v)
			}
		}
		return out, directive
	}
}

// namespaceNames are the namespaces -n may name.
func namespaceNames(ctx context.Context, c clients) ([]string, error) {
	list, err := c.core.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ns := range list.Items {
		out = append(out, ns.Name)
	}
	return out, nil
}

// bundles are the trust bundles of every bundle API the cluster serves, for the
// answers and the completions alike.
func bundles(ctx context.Context, c clients) ([]*certificatesv1.ClusterTrustBundle, error) {
	served, err := bundleapi.Discover(c.core.Discovery())
	if err != nil {
		return nil, err
	}
	var out []*certificatesv1.ClusterTrustBundle
	for _, api := range served.APIs() {
		list, err := bundleapi.NewStore(c.dyn, api).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list %s ClusterTrustBundles: %w", api.GroupVersion, err)
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// rotatingSigners are the signers rotation may name: those whose live bundle says
// where its rotation stands.
func rotatingSigners(ctx context.Context, c clients) ([]string, error) {
	list, err := bundles(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, b := range list {
		if _, ok := b.Annotations[bundle.RotationAnnotation]; ok && b.Spec.SignerName != "" {
			out = append(out, b.Spec.SignerName)
		}
	}
	return out, nil
}

// peers are what federation may name: each FederatedTrustDomain's name and trust
// domain.
func peers(ctx context.Context, c clients) ([]string, error) {
	list, err := c.dyn.Resource(v1alpha1.FederatedTrustDomainResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for i := range list.Items {
		f, err := v1alpha1.FederatedTrustDomainFromUnstructured(&list.Items[i])
		if err != nil {
			continue
		}
		out = append(out, f.Name, f.Spec.TrustDomain)
	}
	return out, nil
}

// anchors are what who-trusts may name besides a PEM file: the SHA-256 of every
// anchor a bundle holds, described by its name and bundle so that the shell shows
// which is which.
func anchors(ctx context.Context, c clients) ([]string, error) {
	list, err := bundles(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, b := range list {
		ders, err := bundle.DecodeCertificates([]byte(b.Spec.TrustBundle))
		if err != nil {
			continue
		}
		for _, der := range ders {
			a := bundle.NewAnchor(der)
			name := a.Name
			if name == "" {
				name = "(no common name)"
			}
			out = append(out, fmt.Sprintf("%s\t%s in %s", bundle.AnchorID(der), oneLine(name), b.Name))
		}
	}
	return out, nil
}
