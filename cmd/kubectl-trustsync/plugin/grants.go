package plugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/tenancy"
)

// NamespaceGrants is what kubectl trustsync grants prints for one namespace: the
// bundles it may trust and the signers it may ask for certificates, each with the
// TrustPolicy that grants it.
type NamespaceGrants struct {
	Namespace string          `json:"namespace"`
	Bundles   []GrantedBundle `json:"bundles"`
	Signers   []GrantedSigner `json:"signers"`
}

// GrantedBundle is one bundle grant: exactly one of Name, SignerName (with the
// LabelSelector narrowing it, "" for all its bundles) and TrustDomain.
type GrantedBundle struct {
	Name          string `json:"name,omitempty"`
	SignerName    string `json:"signerName,omitempty"`
	LabelSelector string `json:"labelSelector,omitempty"`
	TrustDomain   string `json:"trustDomain,omitempty"`
	Policy        string `json:"policy"`
}

// GrantedSigner is one signer grant; DNSNames empty allows only certificates without
// DNS names.
type GrantedSigner struct {
	SignerName string   `json:"signerName"`
	DNSNames   []string `json:"dnsNames"`
	Policy     string   `json:"policy"`
}

// alwaysAllowed is what needs no grant, said under every table.
const alwaysAllowed = "Always allowed: the namespace's own ConfigMap and Secret sources, and the public roots (defaultCAs)."

func (o *options) grants(ctx context.Context) error {
	cl, err := o.clients()
	if err != nil {
		return err
	}
	core := cl.core
	list, err := listKind(ctx, cl.dyn, v1alpha1.TrustPolicyResource, "TrustPolicies", "grants")
	if err != nil {
		return err
	}
	var policies []*v1alpha1.TrustPolicy
	for i := range list.Items {
		p, err := v1alpha1.TrustPolicyFromUnstructured(&list.Items[i])
		if err != nil {
			return err
		}
		policies = append(policies, p)
	}
	namespace, err := o.namespace()
	if err != nil {
		return err
	}
	var namespaces []metav1.ObjectMeta
	if namespace != "" {
		ns, err := core.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read namespace %s, whose labels the policies select: %w", namespace, err)
		}
		namespaces = append(namespaces, ns.ObjectMeta)
	} else {
		all, err := core.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list namespaces, whose labels the policies select: %w", err)
		}
		for _, ns := range all.Items {
			namespaces = append(namespaces, ns.ObjectMeta)
		}
	}
	parsed := tenancy.Parse(policies)
	for _, p := range parsed {
		if p.Err != nil {
			fmt.Fprintf(o.stderr, "warning: TrustPolicy %s grants nothing, its spec is invalid: %s\n", safe(p.Name), safe(p.Err.Error()))
		}
	}
	out := grantsOf(parsed, namespaces)
	if printed, err := printStructured(o, out); printed || err != nil {
		return err
	}
	// -o name: the TrustPolicies that grant what is listed.
	var granting []object
	for _, g := range out {
		for _, b := range g.Bundles {
			granting = append(granting, object{kind: v1alpha1.GroupVersion.WithKind(v1alpha1.TrustPolicyKind), name: b.Policy})
		}
		for _, s := range g.Signers {
			granting = append(granting, object{kind: v1alpha1.GroupVersion.WithKind(v1alpha1.TrustPolicyKind), name: s.Policy})
		}
	}
	if printed, err := o.printNames(granting); printed || err != nil {
		return err
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	row(w, "NAMESPACE", "MAY", "WHAT", "GRANTED BY")
	for _, g := range out {
		if len(g.Bundles) == 0 && len(g.Signers) == 0 {
			row(w, g.Namespace, "-", "nothing granted", "-")
		}
		for _, b := range g.Bundles {
			row(w, g.Namespace, "trust", describeBundle(b), b.Policy)
		}
		for _, s := range g.Signers {
			dns := "no DNS name"
			if len(s.DNSNames) > 0 {
				dns = strings.Join(s.DNSNames, ", ")
			}
			row(w, g.Namespace, "ask", fmt.Sprintf("signer %s for %s", s.SignerName, dns), s.Policy)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintln(o.stdout, alwaysAllowed)
	return err
}

// readGrants is what each namespace (namespace, or all of them for "") is granted,
// for status and who-trusts to flag what a namespace holds and is no longer granted:
// nil where no TrustPolicy exists or they cannot be read (said as a warning), and
// trustsync's own namespace (where its injected index is) left out, as exempt.
func (o *options) readGrants(ctx context.Context, cl clients, namespace string) map[string]tenancy.Grants {
	list, err := cl.dyn.Resource(v1alpha1.TrustPolicyResource).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil // not served: no tenancy
	case err != nil:
		fmt.Fprintf(o.stderr, "warning: TrustPolicies not read, so files holding anchors their namespace is no longer granted are not flagged: %s\n", safe(err.Error()))
		return nil
	case len(list.Items) == 0:
		return nil
	}
	policies := tenancy.Parse(v1alpha1.FromStore(toAny(list.Items), v1alpha1.TrustPolicyFromUnstructured))
	opts := metav1.ListOptions{}
	if namespace != "" {
		opts.FieldSelector = "metadata.name=" + namespace
	}
	nss, err := cl.core.CoreV1().Namespaces().List(ctx, opts)
	if err != nil {
		fmt.Fprintf(o.stderr, "warning: namespaces not read, whose labels the TrustPolicies select, so nothing is flagged as no longer granted: %s\n", safe(err.Error()))
		return nil
	}
	exempt := map[string]bool{}
	if idx, err := cl.core.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.InjectedIndexLabel + "=true"}); err == nil {
		for _, cm := range idx.Items {
			exempt[cm.Namespace] = true
		}
	}
	out := map[string]tenancy.Grants{}
	for _, ns := range nss.Items {
		if !exempt[ns.Name] {
			out[ns.Name] = tenancy.For(policies, ns.Name, ns.Labels)
		}
	}
	return out
}

func toAny(items []unstructured.Unstructured) []any {
	out := make([]any, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// grantsOf is each namespace's grants, in name order.
func grantsOf(policies []tenancy.Policy, namespaces []metav1.ObjectMeta) []NamespaceGrants {
	out := make([]NamespaceGrants, 0, len(namespaces))
	for _, ns := range namespaces {
		g := tenancy.For(policies, ns.Name, ns.Labels)
		ng := NamespaceGrants{Namespace: ns.Name, Bundles: []GrantedBundle{}, Signers: []GrantedSigner{}}
		for _, b := range g.Bundles {
			gb := GrantedBundle{Name: b.Name, Policy: b.Policy}
			switch {
			case !b.TrustDomain.IsZero():
				gb.TrustDomain = b.TrustDomain.String()
			case b.Name == "":
				gb.SignerName, gb.LabelSelector = b.SignerName, b.Labels.String()
			}
			ng.Bundles = append(ng.Bundles, gb)
		}
		for _, s := range g.Signers {
			ng.Signers = append(ng.Signers, GrantedSigner{SignerName: s.SignerName, DNSNames: nonNil(s.DNSNames), Policy: s.Policy})
		}
		out = append(out, ng)
	}
	slices.SortFunc(out, func(a, b NamespaceGrants) int { return strings.Compare(a.Namespace, b.Namespace) })
	return out
}

func describeBundle(b GrantedBundle) string {
	switch {
	case b.Name != "":
		return "bundle " + b.Name
	case b.TrustDomain != "":
		return "trust domain " + b.TrustDomain + "'s anchors"
	case b.LabelSelector != "":
		return "signer " + b.SignerName + "'s bundles selected by " + b.LabelSelector
	}
	return "every bundle of signer " + b.SignerName
}

// listKind lists one of trustsync's cluster-scoped kinds with the user's credentials,
// saying what to do when the cluster does not serve it or the user may not read it.
func listKind(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, kinds, command string) (*unstructured.UnstructuredList, error) {
	list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%s are not served here: install the chart's CRDs (files/crds/%s.%s.yaml, or trustsync-crds.yaml of a release)", kinds, gvr.Resource, gvr.Group)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("%w\nkubectl trustsync %s reads %s (cluster-scoped) with your credentials; trustsync's chart aggregates them into the ClusterRole view, which reads them where a ClusterRoleBinding binds it (kubectl create clusterrolebinding NAME --clusterrole=view --user=YOU), or give a ClusterRole granting list on %s.%s", err, command, kinds, gvr.Resource, gvr.Group)
	}
	return list, err
}
