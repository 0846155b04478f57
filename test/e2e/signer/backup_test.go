package signer

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/cmd/kubectl-trustsync/plugin"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/doccmd"
	"github.com/trustsync/trustsync/test/poll"
)

// docs/operations.md's backup and restore, run as written (the release namespace
// renamed): a CA Secret lost while the signer runs is replaced by a new CA whose
// anchor is published alone, so nothing the old CA issued verifies against the
// bundle; restored from the backup with the signer stopped, the old CA signs again
// and its anchor is the bundle's alone.
func TestSigner_LosingTheCASecretMakesANewCAAndRestoringTheBackupBringsTheOldOneBack(t *testing.T) {
	const namespace, signer = "backup-signer", "example.com/backup"
	cp := planes.Get(t, true)
	ctx := context.Background()
	admin := kube(t, cp.AdminConfig())
	if err := cp.CreateNamespace(ctx, namespace, nil); err != nil {
		t.Fatal(err)
	}
	args := []string{"--namespace=" + namespace, "--signer-name=" + signer, "--ca-propagation=timed"}
	p, err := cp.StartSigner(args...)
	untilTheEnd(t, "signer", p, err)
	cli := controlplane.NewPlugin(t, cp)
	var r plugin.Rotation
	rotation := signerRotation(t, cli, signer, &r)
	published := func() []string {
		b, err := liveStore(t, cp, true).Get(ctx, r.Bundle)
		if err != nil {
			return nil
		}
		ids, _ := bundle.AnchorIDs([]byte(b.Spec.TrustBundle))
		return ids
	}
	poll.True(t, time.Minute, "the signer's first CA, Stable", func() bool { return rotation() == 0 && r.Phase == "Stable" && r.CurrentCA != "" })
	oldCA := r.CurrentCA
	poll.True(t, time.Minute, "the first CA's anchor published alone", func() bool { return slices.Equal(published(), []string{oldCA}) })

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := controlplane.WriteKubeconfig(kubeconfig, cp.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	asWritten := func(marker string) {
		t.Helper()
		commands, err := doccmd.Block("../../../docs/operations.md", marker)
		if err != nil {
			t.Fatal(err)
		}
		bin, err := controlplane.BinDir()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range commands {
			c = strings.ReplaceAll(c, "trustsync-system", namespace)
			sh := exec.Command("bash", "-euo", "pipefail", "-c", c)
			sh.Dir, sh.Env = dir, append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+bin+":"+os.Getenv("PATH"))
			if out, err := sh.CombinedOutput(); err != nil {
				t.Fatalf("docs/operations.md: %s: %v\n%s", c, err, out)
			}
		}
	}
	asWritten("**Back up** both kinds")
	backup, err := os.ReadFile(filepath.Join(dir, "trustsync-keys.yaml"))
	if err != nil || !strings.Contains(string(backup), caSecret(signer)) {
		t.Fatalf("the backup does not hold the CA Secret %s (%v):\n%s", caSecret(signer), err, backup)
	}

	// Lost: the signer cannot tell it from a first start.
	if err := admin.CoreV1().Secrets(namespace).Delete(ctx, caSecret(signer), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, time.Minute, "a new CA, its anchor published alone", func() bool {
		return rotation() == 0 && r.CurrentCA != "" && r.CurrentCA != oldCA && slices.Equal(published(), []string{r.CurrentCA})
	})
	lostCA := r.CurrentCA

	// Restored, with the signer stopped, as the page says: over the new CA's
	// Secret, and where none exists (a new cluster).
	p.Stop(10 * time.Second)
	asWritten("**Restore** into the release namespace")
	restored, err := admin.CoreV1().Secrets(namespace).Get(ctx, caSecret(signer), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := bundle.AnchorIDs(restored.Data["tls.crt"]); err != nil || len(ids) == 0 || ids[0] != oldCA {
		t.Fatalf("restored over the new CA's Secret, tls.crt holds %v (%v), want the backed-up CA %s first", ids, err, oldCA)
	}
	if err := admin.CoreV1().Secrets(namespace).Delete(ctx, caSecret(signer), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	asWritten("**Restore** into the release namespace")
	p, err = cp.StartSigner(args...)
	untilTheEnd(t, "restarted signer", p, err)
	poll.True(t, time.Minute, "the restored CA signing, its anchor published alone", func() bool {
		return rotation() == 0 && r.CurrentCA == oldCA && slices.Equal(published(), []string{oldCA})
	})
	if slices.Contains(published(), lostCA) {
		t.Errorf("the CA made while the Secret was lost, %s, is still published", lostCA)
	}
}
