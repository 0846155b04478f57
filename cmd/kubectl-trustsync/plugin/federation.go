package plugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// Peer is one FederatedTrustDomain, as kubectl trustsync federation prints it: has
// the peer's bundle arrived, and how far has it reached this cluster's pods?
type Peer struct {
	Name        string `json:"name"`
	TrustDomain string `json:"trustDomain"`
	Endpoint    string `json:"endpoint"`
	Ready       string `json:"ready"`
	Reason      string `json:"reason,omitempty"`
	Message     string `json:"message,omitempty"`
	// Sequence is the spiffe_sequence held; LastRefreshed when the endpoint last
	// answered with a bundle accepted.
	Sequence      *uint64    `json:"sequence,omitempty"`
	LastRefreshed *time.Time `json:"lastRefreshed,omitempty"`
	Bundle        string     `json:"bundle,omitempty"`
	Anchors       []string   `json:"anchors"`
	// Holding of Expected running pods selecting the imported bundle hold all its
	// anchors, from the nodes' reports read now.
	Holding  int `json:"holding"`
	Expected int `json:"expected"`
}

func (o *options) federation(ctx context.Context, name string) error {
	cl, err := o.clients()
	if err != nil {
		return err
	}
	list, err := listKind(ctx, cl.dyn, v1alpha1.FederatedTrustDomainResource, "FederatedTrustDomains", "federation")
	if err != nil {
		return err
	}
	c, err := o.cluster(ctx, "") // an imported bundle concerns every pod that selects it
	if err != nil {
		return err
	}
	var out []Peer
	for i := range list.Items {
		f, err := v1alpha1.FederatedTrustDomainFromUnstructured(&list.Items[i])
		if err != nil {
			return err
		}
		if name != "" && f.Name != name && f.Spec.TrustDomain != name {
			continue
		}
		p := Peer{Name: f.Name, TrustDomain: f.Spec.TrustDomain, Endpoint: f.Spec.BundleEndpointURL, Ready: "Unknown",
			Sequence: f.Status.Sequence, Bundle: f.Status.Bundle, Anchors: nonNil(f.Status.Anchors)}
		if cond := meta.FindStatusCondition(f.Status.Conditions, v1alpha1.ConditionReady); cond != nil {
			p.Ready, p.Reason, p.Message = string(cond.Status), cond.Reason, cond.Message
		}
		if f.Status.LastRefreshed != nil {
			t := f.Status.LastRefreshed.UTC()
			p.LastRefreshed = &t
		}
		var imported []*certificatesv1.ClusterTrustBundle
		for _, b := range c.Bundles {
			if b.Spec.SignerName == v1alpha1.FederatedSignerName && b.Labels[v1alpha1.TrustDomainLabel] == f.Spec.TrustDomain {
				imported = append(imported, b)
			}
		}
		if len(p.Anchors) > 0 && len(imported) > 0 {
			p.Holding, p.Expected = c.HoldingAll(p.Anchors, imported)
		}
		if p.Ready != "True" || p.Holding < p.Expected {
			o.code = ExitNotAll
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		if name != "" {
			return fmt.Errorf("no FederatedTrustDomain named %q or for trust domain %q", name, name)
		}
		if o.structured() {
			return o.print(map[string]any{"items": []Peer{}})
		}
		if o.output == outputName {
			return nil
		}
		_, err := fmt.Fprintln(o.stdout, "No FederatedTrustDomains: this cluster imports no peer's bundle (docs/federation.md).")
		return err
	}
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.Name, b.Name) })
	if printed, err := printStructured(o, out); printed || err != nil {
		return err
	}
	var peers []object
	for _, p := range out {
		peers = append(peers, object{kind: v1alpha1.GroupVersion.WithKind(v1alpha1.FederatedTrustDomainKind), name: p.Name})
	}
	if printed, err := o.printNames(peers); printed || err != nil {
		return err
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	head := []string{"NAME", "TRUST DOMAIN", "READY", "REASON", "SEQUENCE", "REFRESHED", "ANCHORS", "PODS HOLDING"}
	if o.wide() {
		head = append(head, "ENDPOINT", "BUNDLE")
	}
	row(w, head...)
	now := time.Now()
	for _, p := range out {
		seq, refreshed := "-", "never"
		if p.Sequence != nil {
			seq = fmt.Sprint(*p.Sequence)
		}
		if p.LastRefreshed != nil {
			refreshed = now.Sub(*p.LastRefreshed).Truncate(time.Second).String() + " ago"
		}
		cells := []string{p.Name, p.TrustDomain, p.Ready, p.Reason, seq, refreshed, fmt.Sprint(len(p.Anchors)), fmt.Sprintf("%d of %d", p.Holding, p.Expected)}
		if o.wide() {
			cells = append(cells, p.Endpoint, p.Bundle)
		}
		row(w, cells...)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, p := range out {
		if p.Ready != "True" && p.Message != "" {
			fmt.Fprintf(o.stdout, "%s: %s\n", safe(p.Name), safe(p.Message))
		}
	}
	return nil
}
