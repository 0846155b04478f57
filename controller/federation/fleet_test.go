package federation

import (
	"context"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

const fleetNamespace = "fleet"

// profile is a ClusterProfile of the fleet with properties (name, value pairs).
func profile(name string, props ...string) *unstructured.Unstructured {
	var list []any
	for i := 0; i+1 < len(props); i += 2 {
		list = append(list, map[string]any{"name": props[i], "value": props[i+1]})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
		"metadata": map[string]any{"name": name, "namespace": fleetNamespace},
		"status":   map[string]any{"properties": list},
	}}
}

// member is a profile carrying trustsync's properties for trust domain td.
func member(name, td string, more ...string) *unstructured.Unstructured {
	return profile(name, append([]string{PropertyTrustDomain, td, PropertyEndpointURL, "https://" + td + ":8443/bundle"}, more...)...)
}

// peerFTD is a FederatedTrustDomain as the fleet made it (fleet) or a user did.
func peerFTD(name, td string, fleet bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trustsync.io/v1alpha1", "kind": v1alpha1.FederatedTrustDomainKind,
		"metadata": map[string]any{"name": name, "uid": name + "-uid"},
		"spec": map[string]any{"trustDomain": td, "bundleEndpointURL": "https://" + td + ":8443/bundle",
			"bundleEndpointProfile": map[string]any{"type": v1alpha1.ProfileWeb}},
	}}
	if fleet {
		u.SetLabels(map[string]string{FleetLabel: FleetValue})
	}
	return u
}

// reconcileFleet runs one reconcile of a fleet over objects, this cluster's trust
// domain a.example, and returns the FederatedTrustDomains after it, by name, and the
// Events recorded.
func reconcileFleet(t *testing.T, objects ...runtime.Object) (map[string]*v1alpha1.FederatedTrustDomain, []string) {
	t.Helper()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		ClusterProfiles:                       "ClusterProfileList",
		v1alpha1.FederatedTrustDomainResource: "FederatedTrustDomainList",
	}, objects...)
	applyAsTheAPIServerWould(dyn, "federatedtrustdomains")
	events := record.NewFakeRecorder(10)
	f := NewFleet(FleetConfig{Dynamic: dyn, Namespace: fleetNamespace, OwnTrustDomains: []string{"a.example"}, Events: events})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.profiles.RunWithContext(ctx)
	go f.peers.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), f.profiles.HasSynced, f.peers.HasSynced) {
		t.Fatal("the informers did not sync")
	}
	if err := f.reconcile(ctx); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	list, err := dyn.Resource(v1alpha1.FederatedTrustDomainResource).List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	out := map[string]*v1alpha1.FederatedTrustDomain{}
	for i := range list.Items {
		ftd, err := v1alpha1.FederatedTrustDomainFromUnstructured(&list.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		out[ftd.Name] = ftd
	}
	var recorded []string
	for len(events.Events) > 0 {
		recorded = append(recorded, <-events.Events)
	}
	return out, recorded
}

// Joining the fleet is joining its trust, leaving it leaving it: one
// FederatedTrustDomain per member profile carrying trustsync's properties, this
// cluster's own left out, a user's own FederatedTrustDomain never touched.
func TestFleet_OnePeerPerMemberProfile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		// want: name -> trust domain of the fleet's FederatedTrustDomains after.
		want        map[string]string
		wantProfile map[string]string // name -> spec.bundleEndpointProfile.type
		wantEvent   string
		wantUsers   []string // FederatedTrustDomains a user made, which must stay
		// wantReplaced: made anew (a trust domain is immutable: the API server refuses
		// to change it in place).
		wantReplaced []string
	}{
		{name: "a member profile joins, as https_web without a bundle", objects: []runtime.Object{member("cluster-b", "b.example")},
			want: map[string]string{"cluster-b": "b.example"}, wantProfile: map[string]string{"cluster-b": v1alpha1.ProfileWeb}},
		{name: "a member with a bundle joins as https_spiffe, its endpoint's ID its domain's",
			objects: []runtime.Object{member("cluster-b", "b.example", PropertyTrustDomainBundle, mustMarshal(peerBundle(seq(1), peerCA)))},
			want:    map[string]string{"cluster-b": "b.example"}, wantProfile: map[string]string{"cluster-b": v1alpha1.ProfileSPIFFE}},
		{name: "this cluster's own profile is not a peer", objects: []runtime.Object{member("cluster-a", "a.example")}, want: map[string]string{}},
		{name: "a profile without trustsync's properties is not a member, and nothing is said",
			objects: []runtime.Object{profile("other", "vendor.example/region", "eu")}, want: map[string]string{}},
		{name: "properties that cannot make a peer are said on the profile, and nothing is made",
			objects: []runtime.Object{member("cluster-b", "B.Example")}, want: map[string]string{},
			wantEvent: "Warning FleetPeerNotJoined its trustsync properties cannot make a FederatedTrustDomain"},
		{name: "a member whose profile left is removed", objects: []runtime.Object{peerFTD("cluster-b", "b.example", true)}, want: map[string]string{}},
		{name: "a member whose trust domain changed is replaced", objects: []runtime.Object{member("cluster-b", "c.example"), peerFTD("cluster-b", "b.example", true)},
			want: map[string]string{"cluster-b": "c.example"}, wantReplaced: []string{"cluster-b"}},
		{name: "a FederatedTrustDomain a user made, of a member's name, is left alone",
			objects: []runtime.Object{member("cluster-b", "b.example"), peerFTD("cluster-b", "b.example", false)},
			want:    map[string]string{}, wantUsers: []string{"cluster-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			after, events := reconcileFleet(t, tc.objects...)
			got := map[string]string{}
			for name, ftd := range after {
				if ftd.Labels[FleetLabel] != FleetValue {
					if !slices.Contains(tc.wantUsers, name) {
						t.Errorf("FederatedTrustDomain %s is not the fleet's and not the user's the test made", name)
					}
					continue
				}
				got[name] = ftd.Spec.TrustDomain
				if want := tc.wantProfile[name]; want != "" && ftd.Spec.BundleEndpointProfile.Type != want {
					t.Errorf("%s's profile is %s; want %s", name, ftd.Spec.BundleEndpointProfile.Type, want)
				}
				if ftd.Annotations[ProfileAnnotation] != fleetNamespace+"/"+name {
					t.Errorf("%s names its profile %q", name, ftd.Annotations[ProfileAnnotation])
				}
			}
			if !mapsEqual(got, tc.want) {
				t.Errorf("the fleet's peers %v; want %v", got, tc.want)
			}
			for _, name := range tc.wantReplaced {
				if ftd, ok := after[name]; !ok || ftd.UID == types.UID(name+"-uid") {
					t.Errorf("%s was changed in place; want it deleted and made anew", name)
				}
			}
			for _, name := range tc.wantUsers {
				if u, ok := after[name]; !ok || u.Labels[FleetLabel] == FleetValue {
					t.Errorf("the user's FederatedTrustDomain %s was taken or removed", name)
				}
			}
			if tc.wantEvent != "" && !slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, tc.wantEvent) }) {
				t.Errorf("Events %q; want one %q", events, tc.wantEvent)
			}
			if tc.wantEvent == "" && len(events) > 0 {
				t.Errorf("Events %q; want none", events)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
