package signer

import (
	"crypto/x509"
	"encoding/asn1"
	"fmt"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustsync/trustsync/policy"
	"github.com/trustsync/trustsync/tenancy"
)

const serviceAccountPrefix = "system:serviceaccount:"

// Condition reasons the approver writes.
const (
	reasonApproved = "TrustsyncPolicyApproved"
	reasonDenied   = "TrustsyncPolicyDenied"
)

// decision is the approver's verdict on one CSR.
type decision struct {
	approve bool
	message string
}

// decide applies the policy's approval rules: a ServiceAccount may have exactly its own
// identity certified (one SPIFFE URI SAN for itself, DNS names its namespace's patterns
// allow, no IP unless allowed, no email, usages from the allow-list); anything else is
// denied, naming the rule. The subject is ignored: the signer never copies it.
func decide(csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest, td spiffeid.TrustDomain, a *policy.Approval) decision {
	deny := func(format string, args ...any) decision {
		return decision{message: fmt.Sprintf(format, args...)}
	}
	namespace, name, ok := serviceAccount(csr.Spec.Username)
	if !ok {
		return deny("requester %q is not a ServiceAccount; trustsync approves only a ServiceAccount's request for its own identity", csr.Spec.Username)
	}
	own, err := policy.WorkloadID(td, namespace, name)
	if err != nil {
		return deny("%v", err)
	}
	if len(req.URIs) != 1 {
		return deny("the request has %d URI SANs; it must have exactly one, the requester's own SPIFFE ID %q", len(req.URIs), own)
	}
	// Compared as SPIFFE IDs: a URI that is not one, however close, is refused.
	if got, err := spiffeid.FromURI(req.URIs[0]); err != nil || got != own {
		return deny("URI SAN %q is not the requester's own SPIFFE ID %q", req.URIs[0].String(), own)
	}
	for _, dns := range req.DNSNames {
		if !slices.ContainsFunc(a.DNSNames, func(p string) bool { return tenancy.MatchDNSName(strings.ReplaceAll(p, "{namespace}", namespace), dns) }) {
			return deny("DNS SAN %q matches none of the patterns allowed for namespace %q: %s", dns, namespace, strings.ReplaceAll(strings.Join(a.DNSNames, ", "), "{namespace}", namespace))
		}
	}
	if len(req.IPAddresses) > 0 && !a.IPAddresses {
		return deny("the request has IP SANs (%v), which policy does not allow", req.IPAddresses)
	}
	if len(req.EmailAddresses) > 0 {
		return deny("the request has email SANs (%v), which trustsync never certifies", req.EmailAddresses)
	}
	for _, u := range csr.Spec.Usages {
		if !slices.Contains(a.Usages, string(u)) {
			return deny("usage %q is not allowed; allowed: %s", u, strings.Join(a.Usages, ", "))
		}
	}
	if csr.Annotations["experimental.cert-manager.io/request-is-ca"] == "true" {
		return deny("the request asks for a CA certificate; this signer issues none")
	}
	switch isCA, err := requestsCA(req); {
	case err != nil:
		return deny("the request's basicConstraints extension does not parse (%v); request a leaf certificate without it", err)
	case isCA:
		return deny("the request asks for a CA certificate (basicConstraints CA:TRUE); this signer issues leaf certificates only: request one without that extension")
	}
	return decision{approve: true, message: fmt.Sprintf("the request is for %s's own identity %s", csr.Spec.Username, own)}
}

var oidBasicConstraints = asn1.ObjectIdentifier{2, 5, 29, 19}

// requestsCA reports whether the PKCS#10 request carries a basicConstraints extension
// with CA:TRUE. The signer would never issue one, but approving it would record an
// approval of something no one may have.
func requestsCA(req *x509.CertificateRequest) (bool, error) {
	for _, ext := range req.Extensions {
		if !ext.Id.Equal(oidBasicConstraints) {
			continue
		}
		var bc struct {
			IsCA       bool `asn1:"optional"`
			MaxPathLen int  `asn1:"optional,default:-1"`
		}
		rest, err := asn1.Unmarshal(ext.Value, &bc)
		if err != nil {
			return false, err
		}
		if len(rest) > 0 {
			return false, fmt.Errorf("%d trailing bytes", len(rest))
		}
		return bc.IsCA, nil
	}
	return false, nil
}

// serviceAccount splits "system:serviceaccount:<namespace>:<name>".
func serviceAccount(username string) (namespace, name string, ok bool) {
	rest, found := strings.CutPrefix(username, serviceAccountPrefix)
	if !found {
		return "", "", false
	}
	namespace, name, found = strings.Cut(rest, ":")
	if !found || len(validation.IsDNS1123Label(namespace)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return "", "", false
	}
	return namespace, name, true
}
