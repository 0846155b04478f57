package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/fixtures"
)

// BenchmarkTargets_1000Namespaces20Targets measures what the TrustTarget controller
// sends as a cluster grows and changes, at 1,000 namespaces each selected by 20
// targets (20,000 ConfigMaps): each iteration creates one namespace and edits one
// target's bundle, and reports the writes each cost (from the controller's own
// trustsync_targets_writes_total) and the time until every object holds the result.
// The needed writes are 20 for the namespace and 1,001 for the edit; an idle round
// (every target reconciled with nothing changed) should cost none.
//
// The targets=1000 case is a thousand teams' targets, each writing ConfigMap roots
// into its own team's namespaces (1,000 namespaces, 1,000 ConfigMaps): a team's new
// namespace needs one reconcile and one write, and so does a new team's target,
// whatever the other 999 do.
func BenchmarkTargets_1000Namespaces20Targets(b *testing.B) {
	b.Run("targets=20", benchTargetsSelectingEveryNamespace)
	b.Run("targets=1000", benchTargetsOfAThousandTeams)
}

func benchTargetsSelectingEveryNamespace(b *testing.B) {
	cp := planes.Get(b, true)
	ctx := context.Background()
	client := kube(b, cp.AdminConfig())
	const nTargets, nNamespaces = 20, 1000
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	label := map[string]string{"bench": "targets-" + run}
	root := fixtures.CA("bench targets")
	anchors := []*fixtures.Cert{root}
	for i := range nTargets {
		controlplane.NativeBundle(b, client, fmt.Sprintf("bench-%s-%d", run, i), root)
	}
	controlplane.InParallel(nNamespaces, 10, func(i int) {
		controlplane.LabelledNamespace(b, client, fmt.Sprintf("bench-%s-%04d", run, i), label)
	})
	start := time.Now()
	for i := range nTargets {
		controlplane.CreateTarget(b, cp, fmt.Sprintf("bench-%s-%d", run, i), map[string]any{
			"sources": []any{map[string]any{"name": fmt.Sprintf("bench-%s-%d", run, i), "path": "ca.crt"}},
			"target":  map[string]any{"configMap": map[string]any{"name": fmt.Sprintf("roots-%d", i)}, "namespaceSelector": map[string]any{"matchLabels": label}},
		})
	}
	namespaces := nNamespaces
	synced := func() bool {
		for i := range nTargets {
			st := controlplane.TargetStatus(b, cp, fmt.Sprintf("bench-%s-%d", run, i))
			if st.Namespaces != namespaces || st.Synced != namespaces {
				return false
			}
		}
		return true
	}
	waitLong(b, "every target synced in every namespace", 15*time.Minute, synced)
	fill := time.Since(start)
	poke := func() float64 { return reconcileAll(b, cp, fmt.Sprintf("bench-%s-0000", run), nTargets) }
	idleBefore := poke()
	idle := poke() - idleBefore

	var nsWrites, nsReconciles, nsTime, editWrites, editTime []float64
	b.ResetTimer()
	for i := range b.N {
		before := poke()
		_, reconciled := targetWrites(b, controllers[cp])
		t0 := time.Now()
		controlplane.LabelledNamespace(b, client, fmt.Sprintf("bench-%s-new-%d", run, i), label)
		namespaces++
		waitLong(b, "the new namespace filled by every target", 5*time.Minute, synced)
		nsTime = append(nsTime, time.Since(t0).Seconds())
		nsReconciles = append(nsReconciles, quietReconciles(b, controllers[cp])-reconciled)
		afterNs := poke()
		nsWrites = append(nsWrites, afterNs-before)

		next := fixtures.CA(fmt.Sprintf("bench targets %d", i))
		anchors = append(anchors, next)
		t0 = time.Now()
		controlplane.SetNativeBundle(b, client, fmt.Sprintf("bench-%s-0", run), anchors...)
		waitLong(b, "the edit in every namespace", 10*time.Minute, func() bool {
			nsList, err := client.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=roots-0"})
			if err != nil {
				return false
			}
			n := 0
			for _, cm := range nsList.Items {
				if strings.HasPrefix(cm.Namespace, "bench-"+run) && strings.Count(cm.Data["ca.crt"], "BEGIN CERTIFICATE") == len(anchors) {
					n++
				}
			}
			return n == namespaces
		})
		editTime = append(editTime, time.Since(t0).Seconds())
		editWrites = append(editWrites, poke()-afterNs)
	}
	b.StopTimer()
	b.ReportMetric(fill.Seconds(), "fill-20000-s")
	b.ReportMetric(idle, "writes/idle-round")
	b.ReportMetric(median(nsWrites), "writes/new-namespace")
	b.ReportMetric(median(nsReconciles), "reconciles/new-namespace")
	b.ReportMetric(median(nsTime), "s/new-namespace")
	b.ReportMetric(median(editWrites), "writes/edit")
	b.ReportMetric(median(editTime), "s/edit")
}

func benchTargetsOfAThousandTeams(b *testing.B) {
	cp := planes.Get(b, true)
	client := kube(b, cp.AdminConfig())
	const teams = 1000
	run := fmt.Sprint(time.Now().UnixNano() % 1000000)
	teamLabel := func(i int) string { return fmt.Sprintf("bench-%s-team-%d", run, i) }
	root := fixtures.CA("bench teams")
	controlplane.NativeBundle(b, client, "bench-teams-"+run, root)
	controlplane.InParallel(teams, 10, func(i int) {
		controlplane.LabelledNamespace(b, client, fmt.Sprintf("bench-%s-%04d", run, i), map[string]string{teamLabel(i): "member"})
	})
	createTeamTarget := func(i int) {
		controlplane.CreateTarget(b, cp, teamLabel(i), map[string]any{
			"sources": []any{map[string]any{"name": "bench-teams-" + run, "path": "ca.crt"}},
			"target":  map[string]any{"configMap": map[string]any{"name": "roots"}, "namespaceSelector": map[string]any{"matchLabels": map[string]any{teamLabel(i): "member"}}},
		})
	}
	start := time.Now()
	controlplane.InParallel(teams, 10, createTeamTarget)
	writes := func() float64 { w, _ := targetWrites(b, controllers[cp]); return w }
	waitLong(b, "every team's ConfigMap written", 15*time.Minute, func() bool { return writes() >= teams })
	fill := time.Since(start)
	quiet := func() float64 { return quietReconciles(b, controllers[cp]) }

	var nsWrites, nsReconciles, nsTime, tWrites, tReconciles, tTime []float64
	b.ResetTimer()
	for i := range b.N {
		// A second namespace of team i.
		reconciled, wrote := quiet(), writes()
		name := fmt.Sprintf("bench-%s-%04d-more", run, i)
		t0 := time.Now()
		controlplane.LabelledNamespace(b, client, name, map[string]string{teamLabel(i): "member"})
		waitLong(b, "roots in the team's new namespace", 5*time.Minute, func() bool {
			_, err := client.CoreV1().ConfigMaps(name).Get(context.Background(), "roots", metav1.GetOptions{})
			return err == nil
		})
		nsTime = append(nsTime, time.Since(t0).Seconds())
		nsReconciles = append(nsReconciles, quiet()-reconciled)
		nsWrites = append(nsWrites, writes()-wrote)

		// A new team: its namespace, then its target.
		team := teams + i
		controlplane.LabelledNamespace(b, client, fmt.Sprintf("bench-%s-%04d", run, team), map[string]string{teamLabel(team): "member"})
		reconciled, wrote = quiet(), writes()
		t0 = time.Now()
		createTeamTarget(team)
		waitLong(b, "the new team's roots", 5*time.Minute, func() bool {
			_, err := client.CoreV1().ConfigMaps(fmt.Sprintf("bench-%s-%04d", run, team)).Get(context.Background(), "roots", metav1.GetOptions{})
			return err == nil
		})
		tTime = append(tTime, time.Since(t0).Seconds())
		tReconciles = append(tReconciles, quiet()-reconciled)
		tWrites = append(tWrites, writes()-wrote)
	}
	b.StopTimer()
	b.ReportMetric(fill.Seconds(), "fill-1000-s")
	b.ReportMetric(median(nsWrites), "writes/new-namespace")
	b.ReportMetric(median(nsReconciles), "reconciles/new-namespace")
	b.ReportMetric(median(nsTime), "s/new-namespace")
	b.ReportMetric(median(tWrites), "writes/new-target")
	b.ReportMetric(median(tReconciles), "reconciles/new-target")
	b.ReportMetric(median(tTime), "s/new-target")
}

// waitLong polls ok every second for up to d.
func waitLong(t testing.TB, what string, d time.Duration, ok func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Second, d, true, func(context.Context) (bool, error) { return ok(), nil }); err != nil {
		t.Fatalf("never saw %s within %s: %v", what, d, err)
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
