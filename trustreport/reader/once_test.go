package reader

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// A short-lived reader reads with its user's credentials: pods it may not list are
// an error (there is no answer without them); what else it may not read is left out
// and said, so the answer says what it could not see.
func TestOnce_WhatItMayNotReadIsSaidAndOnlyPodsAreNeeded(t *testing.T) {
	forbidden := func(resource string) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", errors.New("RBAC: access denied"))
	}
	for _, tc := range []struct {
		name      string
		refuse    map[string]bool // resource -> list refused
		wantErr   string
		wantWarns []string
		wantPods  int
	}{
		{name: "everything readable: the pods of the namespace, no warning", wantPods: 1},
		{name: "pods refused: an error naming the list", refuse: map[string]bool{"pods": true}, wantErr: "list pods: "},
		{name: "TrustTargets refused: their objects are not counted, and that is said", refuse: map[string]bool{"trusttargets": true}, wantPods: 1,
			wantWarns: []string{"TrustTargets' ConfigMaps and Secrets, and the pods reading them, are not counted"}},
		{name: "namespaces refused: the same", refuse: map[string]bool{"namespaces": true}, wantPods: 1,
			wantWarns: []string{"TrustTargets' ConfigMaps and Secrets, and the pods reading them, are not counted"}},
		{name: "ConfigMaps refused: the index of annotated objects is not read, and that is said", refuse: map[string]bool{"configmaps": true}, wantPods: 1,
			wantWarns: []string{"the controller's index of annotated objects (the ConfigMap labelled " + v1alpha1.InjectedIndexLabel + ") not read"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"}}, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}})
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
				v1alpha1.TrustTargetResource: "TrustTargetList", v1alpha1.NodeTrustReportResource: "NodeTrustReportList"})
			for resource := range tc.refuse {
				reactor := func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, forbidden(resource) }
				core.PrependReactor("list", resource, reactor)
				dyn.PrependReactor("list", resource, reactor)
			}
			var warns []string
			c, err := Once(context.Background(), core, dyn, "team-a", func(w string) { warns = append(warns, w) })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Pods) != tc.wantPods {
				t.Errorf("%d pods; want %d", len(c.Pods), tc.wantPods)
			}
			if len(warns) != len(tc.wantWarns) {
				t.Fatalf("warnings %q; want %q", warns, tc.wantWarns)
			}
			for i, w := range tc.wantWarns {
				if !strings.Contains(warns[i], w) {
					t.Errorf("warning %q; want it to say %q", warns[i], w)
				}
			}
		})
	}
}
