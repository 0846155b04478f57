// Package render is the pipeline's pure stage. From a pod's sources (a Plan), what those
// sources hold now (a Snapshot) and the last Rendering, Render makes the next Rendering:
// the files to write and the state they give the app. It watches nothing, reads no
// disk and keeps no clock, so every rule of the trust files (merge, last good content,
// optional paths, formats, passwords) is tested here as a table.
package render

import (
	"encoding/json"
	"fmt"
	"slices"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	tsbundle "github.com/trustsync/trustsync/bundle"
)

// Plan is what one pod asked for: its trust paths, what each is made of, and whether a
// workload certificate belongs to its files. It is fixed for the pod's life.
type Plan struct {
	namespace   string
	paths       []pathPlan
	certificate bool
	selectors   []BundleSelector
}

// BundleSelector is one distinct name or signerName selection of the plan; items with
// the same selection (one bundle as PEM and as a truststore, say) share it, and so
// share one watch.
type BundleSelector struct {
	// Key identifies what the selector selects: equal keys select the same bundles.
	Key      string
	Selector tsbundle.Selector
	match    func(*certificatesv1.ClusterTrustBundle) bool
}

// pathPlan is every item writing one file, in one format (the items agree on it).
type pathPlan struct {
	path   string
	format string
	// profile is a pkcs12 file's (v1alpha1.Source.Profile), "" for other formats.
	profile string
	// password is a truststore's password Secret key; nil means the default password.
	password *v1alpha1.KeyRef
	items    []item
}

type item struct {
	source v1alpha1.Source
	// selector indexes Plan.selectors for a bundle item; -1 otherwise.
	selector int
}

// optional is upstream's rule, per path: optional only if every item is.
func (p pathPlan) optional() bool {
	for _, it := range p.items {
		if !it.source.Optional {
			return false
		}
	}
	return true
}

// NewPlan groups sources by path, in order of first appearance, for a pod in
// namespace; certificate says the pod's files include a workload certificate.
func NewPlan(sources []v1alpha1.Source, namespace string, certificate bool) (*Plan, error) {
	p := &Plan{namespace: namespace, certificate: certificate}
	for _, s := range sources {
		i := slices.IndexFunc(p.paths, func(g pathPlan) bool { return g.path == s.Path })
		if i < 0 {
			p.paths = append(p.paths, pathPlan{path: s.Path, format: s.FileFormat(), profile: s.Profile(), password: s.PasswordSecret})
			i = len(p.paths) - 1
		}
		it := item{source: s, selector: -1}
		if sel, ok := s.Selector(); ok {
			var err error
			if it.selector, err = p.addSelector(sel); err != nil {
				return nil, err
			}
		}
		p.paths[i].items = append(p.paths[i].items, it)
	}
	return p, nil
}

func (p *Plan) addSelector(sel tsbundle.Selector) (int, error) {
	key, err := selectorKey(sel)
	if err != nil {
		return 0, err
	}
	if i := slices.IndexFunc(p.selectors, func(b BundleSelector) bool { return b.Key == key }); i >= 0 {
		return i, nil
	}
	match, err := sel.Matcher()
	if err != nil {
		return 0, err
	}
	p.selectors = append(p.selectors, BundleSelector{Key: key, Selector: sel, match: match})
	return len(p.selectors) - 1, nil
}

// selectorKey identifies what a selector selects: equal keys select the same bundles.
func selectorKey(sel tsbundle.Selector) (string, error) {
	labels := "nil"
	if sel.LabelSelector != nil {
		b, err := json.Marshal(sel.LabelSelector)
		if err != nil {
			return "", fmt.Errorf("the labelSelector %+v of signer %q cannot be encoded to compare it with others: %w", *sel.LabelSelector, sel.SignerName, err)
		}
		labels = string(b)
	}
	return sel.Name + "\x00" + sel.SignerName + "\x00" + labels, nil
}

// Namespace is the pod's namespace, where its ConfigMaps and Secrets are read.
func (p *Plan) Namespace() string { return p.namespace }

// Selectors lists the plan's distinct bundle selections.
func (p *Plan) Selectors() []BundleSelector { return p.selectors }

// ConfigMaps and Secrets list, once each, the objects of the pod's namespace the plan
// reads: sources, and truststore passwords.
func (p *Plan) ConfigMaps() []string {
	return p.objects(func(s v1alpha1.Source) *v1alpha1.KeyRef { return s.ConfigMap }, nil)
}

// Secrets: see ConfigMaps.
func (p *Plan) Secrets() []string {
	return p.objects(func(s v1alpha1.Source) *v1alpha1.KeyRef { return s.Secret }, func(g pathPlan) *v1alpha1.KeyRef { return g.password })
}

func (p *Plan) objects(ofItem func(v1alpha1.Source) *v1alpha1.KeyRef, ofPath func(pathPlan) *v1alpha1.KeyRef) []string {
	var names []string
	add := func(ref *v1alpha1.KeyRef) {
		if ref != nil && !slices.Contains(names, ref.Name) {
			names = append(names, ref.Name)
		}
	}
	for _, g := range p.paths {
		for _, it := range g.items {
			add(ofItem(it.source))
		}
		if ofPath != nil {
			add(ofPath(g))
		}
	}
	return names
}

// Paths lists the trust paths, in order of first appearance.
func (p *Plan) Paths() []string {
	out := make([]string, 0, len(p.paths))
	for _, g := range p.paths {
		out = append(out, g.path)
	}
	return out
}

// Required lists the files that must exist for the pod to start: the certificate and
// key when one is asked for, and every path with a non-optional source.
func (p *Plan) Required() []string {
	var out []string
	if p.certificate {
		out = append(out, v1alpha1.FileCertificate, v1alpha1.FileKey)
	}
	for _, g := range p.paths {
		if !g.optional() && !slices.Contains(out, g.path) {
			out = append(out, g.path)
		}
	}
	return out
}
