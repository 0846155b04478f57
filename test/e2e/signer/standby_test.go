package signer

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/test/controlplane"
)

// standby runs a signer for signer name, alone in namespace ns, whose Lease is held by
// someone else (renewed now, for an hour) when it starts: it stands by.
func standby(t *testing.T, cp *controlplane.ControlPlane, ns, signer string) *controlplane.Process {
	t.Helper()
	ctx := context.Background()
	if err := cp.CreateNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	holdLease(t, cp, ns, "another-replica")
	p, err := cp.StartSigner("--namespace="+ns, "--signer-name="+signer, "--ca-propagation-window=1s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	return p
}

// holdLease makes holder the signer Lease's holder in ns, renewed now, for an hour.
func holdLease(t *testing.T, cp *controlplane.ControlPlane, ns, holder string) {
	t.Helper()
	leases := kube(t, cp.AdminConfig()).CoordinationV1().Leases(ns)
	now := metav1.NewMicroTime(time.Now())
	spec := coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](3600), AcquireTime: &now, RenewTime: &now}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, "trustsync-signer", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "trustsync-signer"}, Spec: spec}, metav1.CreateOptions{})
			return err == nil, nil
		}
		if err != nil {
			return false, nil
		}
		l.Spec = spec
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err == nil, nil // a conflict with the signer's own renewal: try again
	})
	if err != nil {
		t.Fatalf("cannot make %s hold the Lease in %s: %v", holder, ns, err)
	}
}

// A signer that does not hold the Lease acts on nothing: no CA, no published bundle,
// no approval, no signature. Once the Lease is free it takes it and does all of that,
// which shows the quiet before was standing by, not being unable to act.
func TestSigner_AStandbyActsOnNothingUntilItLeads(t *testing.T) {
	cp := planes.Get(t, true)
	ctx := context.Background()
	const ns, signer = "standby", "example.com/standby"
	p := standby(t, cp, ns, signer)
	// A reference leader, started alongside with the same flags: once it has done all
	// of it (CA, bundle, approval, signature), so would the standby have, were it
	// acting; however slow the machine.
	const refNS, refSigner = "standby-reference", "example.com/standby-reference"
	if err := cp.CreateNamespace(ctx, refNS, nil); err != nil {
		t.Fatal(err)
	}
	ref, err := cp.StartSigner("--namespace="+refNS, "--signer-name="+refSigner, "--ca-propagation-window=1s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Stop(5 * time.Second) })
	csr := requestAs(t, cp, "web", signer, nil, []string{"spiffe://cluster.local/ns/apps/sa/web"})
	refCSR := requestAs(t, cp, "web", refSigner, nil, []string{"spiffe://cluster.local/ns/apps/sa/web"})

	if done := waitDone(t, cp, refCSR.Name); len(done.Status.Certificate) == 0 {
		t.Fatalf("the reference leader did not issue: %+v\n%s", done.Status, ref.Tail())
	}
	// And the standby has read the Lease and found another holder.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return strings.Contains(p.Tail(), `identity="another-replica" self=false`), nil
	}); err != nil {
		t.Fatalf("the standby never saw the Lease's holder:\n%s", p.Tail())
	}
	client := kube(t, cp.AdminConfig())
	if got, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{}); err != nil || len(got.Status.Conditions) > 0 || len(got.Status.Certificate) > 0 {
		t.Fatalf("the standby touched the CSR: %+v, %v", got.Status, err)
	}
	if secrets, err := client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); err != nil || len(secrets.Items) > 0 {
		t.Fatalf("the standby created Secrets: %d, %v", len(secrets.Items), err)
	}
	if _, err := liveStore(t, cp, true).Get(ctx, "example.com:standby:live"); !apierrors.IsNotFound(err) {
		t.Fatalf("the standby published a bundle: %v", err)
	}
	if p.Exited() {
		t.Fatalf("the standby exited: %v\n%s", p.Wait(), p.Tail())
	}

	// The other replica is gone: its Lease expires at once.
	if err := client.CoordinationV1().Leases(ns).Delete(ctx, "trustsync-signer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if done := waitDone(t, cp, csr.Name); len(done.Status.Certificate) == 0 {
		t.Fatalf("once leading, the signer did not issue: %+v", done.Status)
	}
}

// A leader whose Lease is taken (a partition healed, another replica sure it had
// expired) stops at once rather than act beside the new holder: it exits, saying why,
// for its Deployment to restart it as a standby.
func TestSigner_ALeaderThatLosesItsLeaseStops(t *testing.T) {
	cp := planes.Get(t, true)
	const ns, signer = "deposed", "example.com/deposed"
	p := standby(t, cp, ns, signer)
	if err := kube(t, cp.AdminConfig()).CoordinationV1().Leases(ns).Delete(context.Background(), "trustsync-signer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	csr := requestAs(t, cp, "web", signer, nil, []string{"spiffe://cluster.local/ns/apps/sa/web"})
	waitDone(t, cp, csr.Name) // leading now

	holdLease(t, cp, ns, "the-new-leader")
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return p.Exited(), nil
	})
	if err != nil {
		t.Fatalf("the deposed leader still runs 30 s after losing its Lease:\n%s", p.Tail())
	}
	if !strings.Contains(p.Tail(), "lost the Lease "+ns+"/trustsync-signer") {
		t.Errorf("the deposed leader exited without saying why:\n%s", p.Tail())
	}
}
