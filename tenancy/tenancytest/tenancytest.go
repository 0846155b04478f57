// Package tenancytest answers what a namespace is granted without an API server, for
// the unit tests of every place that enforces: the webhook, the agent, the controller
// and the signer.
package tenancytest

import (
	"context"
	"errors"
	"testing"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/tenancy"
)

// Grants is a cluster's TrustPolicies and namespaces as a tenancy.Lookup sees them.
type Grants struct {
	// Policies are parsed from the specs given to New.
	Policies []tenancy.Policy
	// Labels are each namespace's labels (a namespace absent has none).
	Labels map[string]map[string]string
	// Exempt is trustsync's own namespace; Unknown a namespace whose grants cannot be
	// told (the watches have not listed yet).
	Exempt, Unknown string
}

// New parses the policies, by name, failing the test on an invalid spec.
func New(t testing.TB, specs map[string]v1alpha1.TrustPolicySpec) *Grants {
	t.Helper()
	g := &Grants{Labels: map[string]map[string]string{}}
	for name, s := range specs {
		parsed, err := v1alpha1.ParseTrustPolicySpec(&s)
		if err != nil {
			t.Fatalf("TrustPolicy %s: %v", name, err)
		}
		g.Policies = append(g.Policies, tenancy.Policy{Name: name, Spec: parsed})
	}
	return g
}

// Lookup is a tenancy.Lookup over g.
func (g *Grants) Lookup(_ context.Context, namespace string) (tenancy.Grants, bool, error) {
	switch namespace {
	case g.Exempt:
		return tenancy.Grants{Namespace: namespace}, true, nil
	case g.Unknown:
		return tenancy.Grants{}, false, errors.New("the TrustPolicies and namespaces have not been listed yet")
	}
	return tenancy.For(g.Policies, namespace, g.Labels[namespace]), false, nil
}
