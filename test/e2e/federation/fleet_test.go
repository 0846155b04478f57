package federation

import (
	"context"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trustsync/trustsync/api/v1alpha1"
	fleet "github.com/trustsync/trustsync/controller/federation"
	"github.com/trustsync/trustsync/test/poll"
)

// A fleet's ClusterProfiles (the cluster inventory API, its CRD as sig-multicluster
// publishes it) decide A's peers: a profile carrying a trustsync bundle endpoint
// becomes a FederatedTrustDomain that imports the member's bundle; A's own profile,
// one without the properties and one with properties that cannot work make none (the
// last says why in an Event); a FederatedTrustDomain a user made under a member's name
// is left alone; a member leaving takes its FederatedTrustDomain with it.
func TestFleet_JoiningTheFleetIsJoiningItsTrust(t *testing.T) {
	const fleetNS = "fleet"
	if err := planes.Get(t, true).CreateNamespace(context.Background(), fleetNS, nil); err != nil {
		t.Fatal(err)
	}
	c := start(t, "--fleet-cluster-profile-namespace="+fleetNS, "--fleet-own-trust-domains=a.example")
	c.liveB(t)
	caCert, _ := c.caOf(t)
	profiles := dyn(t, c.a).Resource(fleet.ClusterProfiles).Namespace(fleetNS)
	profile := func(name string, props map[string]string) {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
			"metadata": map[string]any{"name": name, "namespace": fleetNS},
			"spec":     map[string]any{"displayName": name, "clusterManager": map[string]any{"name": "test-fleet"}},
		}}
		created, err := profiles.Create(context.Background(), u, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var list []any
		for k, v := range props {
			list = append(list, map[string]any{"name": k, "value": v, "lastObservedTime": time.Now().UTC().Format(time.RFC3339)})
		}
		created.Object["status"] = map[string]any{"properties": list}
		if _, err := profiles.UpdateStatus(context.Background(), created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = profiles.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	ftds := dyn(t, c.a).Resource(v1alpha1.FederatedTrustDomainResource)
	// A FederatedTrustDomain a user made, under the name of a member to come.
	user := c.peer("cluster-c", "https://"+c.endpoint+"/c.example", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw})))
	user.Object["spec"].(map[string]any)["trustDomain"] = "c.example"
	user.Object["spec"].(map[string]any)["bundleEndpointProfile"] = map[string]any{"type": "https_spiffe", "endpointSPIFFEID": v1alpha1.BundleEndpointID("c.example")}
	if _, err := ftds.Create(context.Background(), user, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ftds.Delete(context.Background(), "cluster-c", metav1.DeleteOptions{}) })

	profile("cluster-b", map[string]string{
		fleet.PropertyTrustDomain: tdB, fleet.PropertyEndpointURL: "https://" + c.endpoint + "/" + tdB,
		fleet.PropertyTrustDomainBundle: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw})),
	})
	profile("cluster-a", map[string]string{fleet.PropertyTrustDomain: "a.example", fleet.PropertyEndpointURL: "https://a.example:8443/a.example"})
	profile("not-trustsync", map[string]string{"other.example/region": "eu"})
	profile("cluster-c", map[string]string{fleet.PropertyTrustDomain: "c.example", fleet.PropertyEndpointURL: "https://c.example:8443/c.example"})
	// Created last: the fleet reconciles whole, so the Event on it comes from a pass that
	// saw every profile above, and what that pass did not do to them it will not do.
	profile("broken", map[string]string{fleet.PropertyTrustDomain: "broken.example", fleet.PropertyEndpointURL: "http://broken.example/broken.example"})

	poll.Eventually(t, time.Minute, "the member's FederatedTrustDomain imports its bundle", func() (bool, string) {
		u, err := ftds.Get(context.Background(), "cluster-b", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		f, _ := v1alpha1.FederatedTrustDomainFromUnstructured(u)
		st, reason, msg := ready(f.Status)
		return st == metav1.ConditionTrue && u.GetLabels()[fleet.FleetLabel] == fleet.FleetValue, string(st) + " " + reason + ": " + msg
	})
	if c.imported(t) == nil {
		t.Error("no imported bundle for the member")
	}
	poll.Eventually(t, 30*time.Second, "the broken profile is named in an Event", func() (bool, string) {
		list, err := kube(t, c.a).CoreV1().Events(fleetNS).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=broken"})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range list.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "FleetPeerNotJoined" && strings.Contains(e.Message, "must be an https URL") {
				return true, ""
			}
		}
		return false, "no FleetPeerNotJoined Event"
	})
	for _, name := range []string{"cluster-a", "not-trustsync", "broken"} {
		if _, err := ftds.Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("profile %s made a FederatedTrustDomain (err %v)", name, err)
		}
	}
	if u, err := ftds.Get(context.Background(), "cluster-c", metav1.GetOptions{}); err != nil || u.GetLabels()[fleet.FleetLabel] != "" ||
		u.Object["spec"].(map[string]any)["bundleEndpointURL"] != "https://"+c.endpoint+"/c.example" {
		t.Errorf("the user's FederatedTrustDomain cluster-c was touched: %v %v", err, u)
	}

	// The member leaves the fleet.
	if err := profiles.Delete(context.Background(), "cluster-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 30*time.Second, "the member's FederatedTrustDomain goes with its profile", func() (bool, string) {
		_, err := ftds.Get(context.Background(), "cluster-b", metav1.GetOptions{})
		return apierrors.IsNotFound(err), "still there"
	})
	// No garbage collector runs in this control plane: remove the bundle it would.
	_ = deleteImported(t, c)
}
