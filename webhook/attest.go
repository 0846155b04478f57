package webhook

import (
	"context"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// Authorizer answers whether a user may perform verb on a signer name, as the API
// server's authorizer does for its own admission plugins.
type Authorizer interface {
	Authorize(ctx context.Context, user authenticationv1.UserInfo, verb, signerName string) (bool, error)
}

// SubjectAccessReviewer asks the API server, through SubjectAccessReviews, on behalf
// of the user an admission review names.
type SubjectAccessReviewer struct {
	Client authorizationclient.SubjectAccessReviewInterface
}

// Authorize implements Authorizer.
func (s SubjectAccessReviewer) Authorize(ctx context.Context, user authenticationv1.UserInfo, verb, signerName string) (bool, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, Groups: user.Groups, UID: user.UID, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Group: "certificates.k8s.io", Version: "*", Resource: "signers", Verb: verb, Name: signerName,
		},
	}}
	res, err := s.Client.Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("SubjectAccessReview for %q on signer %q failed: %w", verb, signerName, err)
	}
	if res.Status.EvaluationError != "" && !res.Status.Allowed {
		return false, fmt.Errorf("SubjectAccessReview for %q on signer %q: %s", verb, signerName, res.Status.EvaluationError)
	}
	return res.Status.Allowed, nil
}

// mayAttest applies upstream's rule: the user may attest for the signer name itself,
// or for "<domain>/*". An authorizer error counts as a denial (and is returned so the
// caller can say so); a later grant still wins over an earlier error.
func mayAttest(ctx context.Context, authz Authorizer, user authenticationv1.UserInfo, signerName string) (bool, error) {
	allowed, err := authz.Authorize(ctx, user, "attest", signerName)
	if allowed {
		return true, nil
	}
	domain, _, _ := strings.Cut(signerName, "/")
	allowed, wildErr := authz.Authorize(ctx, user, "attest", domain+"/*")
	if allowed {
		return true, nil
	}
	if err == nil {
		err = wildErr
	}
	return false, err
}

// onlyGCFieldsChanged reports whether an update changes nothing but ownerReferences,
// finalizers (and the bookkeeping fields selfLink and managedFields): upstream exempts
// those from the attest check so garbage collection and storage migration never need
// the permission.
func onlyGCFieldsChanged(newObj, oldObj *unstructured.Unstructured) bool {
	if oldObj == nil {
		return false
	}
	n := newObj.DeepCopy()
	n.SetOwnerReferences(oldObj.GetOwnerReferences())
	n.SetFinalizers(oldObj.GetFinalizers())
	n.SetSelfLink(oldObj.GetSelfLink())
	n.SetManagedFields(oldObj.GetManagedFields())
	return equality.Semantic.DeepEqual(n.Object, oldObj.Object)
}
