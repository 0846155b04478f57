package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/test/poll"
)

// The attack as it was found: a pod never sent to the webhook (no trustsync.io/inject)
// says in a forged trustsync.io/status that a "sidecar" writes 20 trust files into its
// emptyDir, and fills each with 4 MiB of distinct certificates. The agent reads at
// most 4 MiB of it, says which files it did not read, keeps observing the node's other
// pods, and is not restarted (it was OOM-killed, its node's report stopped and every
// pod there went NotObserved). Its memory under that pod is logged for
// docs/benchmarks.md.
func TestObservation_AHostilePodDoesNotStopTheAgent(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "hostile", nil)
	before := agentRSS(t, n)
	restarts := agentRestarts(t, n)

	var sources []map[string]string
	for i := range 20 {
		sources = append(sources, map[string]string{"name": "corp", "path": fmt.Sprintf("ca-%02d.pem", i)})
	}
	list, err := json.Marshal(sources)
	if err != nil {
		t.Fatal(err)
	}
	status, _ := json.Marshal(v1alpha1.InjectionStatus{Sidecar: "trustsync", Volume: "trust", MountPath: "/etc/trust"})
	pod := appPod("hostile", map[string]string{v1alpha1.AnnotationStatus: string(status)}, 1000, "exec sleep 3600")
	pod.Spec.Volumes = []corev1.Volume{{Name: "trust", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "trust", MountPath: "/etc/trust"}}
	forged := pod.Spec.Containers[0]
	forged.Name, forged.Args, forged.Command = "trustsync", []string{contract.Flag(contract.FlagDir, "/etc/trust"), contract.Flag(contract.FlagSources, string(list))}, []string{"sh", "-c", "exec sleep 3600", "--"}
	pod.Spec.Containers = append(pod.Spec.Containers, forged)
	created := createPod(t, ns, pod)
	n.WaitPod(t, ns, "hostile", 2*time.Minute, "Ready", cluster.PodReady)

	// The files, written into the pod's emptyDir as its containers would.
	dir := filepath.Join(n.Dir, "kubelet", "pods", string(created.UID), "volumes", "kubernetes.io~empty-dir", "trust")
	writeHostileFiles(t, dir, 20, 4<<20)

	poll.True(t, 2*time.Minute, "the agent's report on the hostile pod, with the files beyond its bounds not read", func() bool {
		files, ok := reportedFiles(t, n, ns, "hostile", created.UID)
		if !ok {
			return false
		}
		notRead := 0
		for _, f := range files {
			if strings.Contains(f.Error, "not read") {
				notRead++
			}
		}
		return len(files) == 17 && notRead == 16 && files[0].Error == ""
	})

	// Still observing: a pod created after it is reported.
	honest := appPod("honest", nil, 1000, "exec sleep 3600")
	honest.Spec.Volumes = []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{SignerName: ptrTo("trustsync.io/workload"), LabelSelector: &metav1.LabelSelector{}, Path: "ca.pem"}}}}}}}
	honest.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "roots", MountPath: "/etc/roots"}}
	honestPod := createPod(t, ns, honest)
	n.WaitPod(t, ns, "honest", 2*time.Minute, "Ready", cluster.PodReady)
	poll.True(t, time.Minute, "the agent reporting a pod created after the hostile one", func() bool {
		files, ok := reportedFiles(t, n, ns, "honest", honestPod.UID)
		return ok && len(files) == 1 && files[0].Error == "" && files[0].AnchorSet != ""
	})
	if got := agentRestarts(t, n); got != restarts {
		t.Errorf("the agent restarted %d times under the hostile pod", got-restarts)
	}
	after := agentRSS(t, n)
	t.Logf("the agent's resident memory: %d KiB before the hostile pod, %d KiB with it (20 files of 4 MiB of distinct certificates)", before, after)
	// A bound, not a timing: what one pod writes must not grow the agent toward its
	// 512 MiB limit (it kept its anchors' certificates, then sent an Event per
	// expiring anchor, and reached 357 MiB).
	if grew := (after - before) >> 10; grew > 128 {
		t.Errorf("the agent grew by %d MiB under one hostile pod; want a bounded cost, under 128 MiB", grew)
	}
}

// writeHostileFiles fills files ca-00.pem... of dir with size bytes of distinct
// certificates each, generated on every core.
func writeHostileFiles(t *testing.T, dir string, files, size int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, files)
	for i := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data, err := fixtures.DistinctPEM(size, int64(i)<<32)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("ca-%02d.pem", i)), data, 0o644)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// reportedFiles is what the node's report says the pod holds, false while it does not
// list the pod.
func reportedFiles(t *testing.T, n *cluster.Node, ns, name string, uid types.UID) ([]v1alpha1.FileHolding, bool) {
	t.Helper()
	u, err := dynamic.NewForConfigOrDie(n.Config).Resource(v1alpha1.NodeTrustReportResource).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, false
	}
	for _, item := range u.Items {
		data, _ := json.Marshal(item.Object)
		var r v1alpha1.NodeTrustReport
		if json.Unmarshal(data, &r) != nil {
			continue
		}
		for _, p := range r.Pods {
			if p.Namespace == ns && p.Name == name && p.UID == string(uid) {
				return p.Files, true
			}
		}
	}
	return nil, false
}

// agentContainer is the node's agent container status.
func agentContainer(t *testing.T, n *cluster.Node) corev1.ContainerStatus {
	t.Helper()
	pods, err := n.Client.CoreV1().Pods(releaseNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
	if err != nil || len(pods.Items) != 1 || len(pods.Items[0].Status.ContainerStatuses) != 1 {
		t.Fatalf("the node's agent pod: %v, %v", pods, err)
	}
	return pods.Items[0].Status.ContainerStatuses[0]
}

func agentRestarts(t *testing.T, n *cluster.Node) int32 { return agentContainer(t, n).RestartCount }

// agentRSS is the agent process's resident memory in KiB, as the node's kernel says.
func agentRSS(t *testing.T, n *cluster.Node) int {
	t.Helper()
	id := strings.TrimPrefix(agentContainer(t, n).ContainerID, "containerd://")
	out, err := n.Run(context.Background(), "ctr", "tasks", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != id {
			continue
		}
		status, err := os.ReadFile("/proc/" + fields[1] + "/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kib, _ := strconv.Atoi(strings.Fields(v)[0])
				return kib
			}
		}
	}
	t.Fatalf("no task %s among\n%s", id, out)
	return 0
}
