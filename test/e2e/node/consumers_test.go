package node

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/trustsync/trustsync/cmd/kubectl-trustsync/plugin"
	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/poll"
	"github.com/trustsync/trustsync/trustreport/query"
)

// A platform team moving from trust-manager: a TrustTarget writes the signer's live
// bundle into a ConfigMap, as PEM and as a PKCS#12 truststore, and plain pods read it
// as an ordinary configMap volume, a Java truststore, or an env variable; another
// pod mounts a ConfigMap annotated to ask for the same bundle. The agent observes the
// volumes as the kubelet wrote them (the annotated one known from the controller's
// index): who-trusts lists the pods and both ConfigMaps; a CA rotation names the volume pod while the kubelet has not refreshed
// it, names the env pod as not observable, and signs only once the volume's file
// holds the new CA and the floor has passed.
func TestConsumers_ARotationWaitsForPodsReadingATargetsConfigMap(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "consumers", restricted)
	live := map[string]any{"signerName": "trustsync.io/workload", "labelSelector": map[string]any{"matchLabels": map[string]any{liveLabel: "live"}}}
	withPath := func(path, format string) map[string]any {
		s := map[string]any{"path": path}
		for k, v := range live {
			s[k] = v
		}
		if format != "" {
			s["format"] = format
		}
		return s
	}
	createTarget(t, n, "e2e-consumers", ns, "trust-ca", withPath("ca.pem", ""), withPath("truststore.p12", "pkcs12"))
	poll.True(t, time.Minute, "the TrustTarget's ConfigMap", func() bool {
		_, err := n.Client.CoreV1().ConfigMaps(ns).Get(context.Background(), "trust-ca", metav1.GetOptions{})
		return err == nil
	})

	// A ConfigMap annotated to ask for the same bundle: its readers are known to the
	// agent only through the controller's index.
	sources, err := json.Marshal([]any{withPath("ca.pem", "")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Client.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "annotated-ca",
		Annotations: map[string]string{"trustsync.io/inject": "true", "trustsync.io/sources": string(sources)}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mountOf := func(configMap, name string, items ...corev1.KeyToPath) *corev1.Pod {
		pod := appPod(name, nil, 1000, "exec sleep 3600")
		pod.Spec.Volumes = []corev1.Volume{{Name: "trust", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: configMap}, Items: items}}}}
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "trust", MountPath: "/etc/trust", ReadOnly: true}}
		return pod
	}
	mount := func(name string, items ...corev1.KeyToPath) *corev1.Pod { return mountOf("trust-ca", name, items...) }
	env := appPod("env", nil, 1000, "exec sleep 3600")
	env.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "CA_PEM", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "trust-ca"}, Key: "ca.pem"}}}}
	for _, pod := range []*corev1.Pod{mount("volume"), mount("java", corev1.KeyToPath{Key: "truststore.p12", Path: "cacerts"}), env, mountOf("annotated-ca", "annotated")} {
		createPod(t, ns, pod)
	}
	for _, name := range []string{"volume", "java", "env", "annotated"} {
		n.WaitPod(t, ns, name, 2*time.Minute, "Ready", cluster.PodReady)
	}

	rotation := func() plugin.Rotation { return workloadRotation(t, n) }
	var r plugin.Rotation
	poll.True(t, time.Minute, "a stable rotation", func() bool { r = rotation(); return r.Phase == "Stable" })
	oldCA := r.CurrentCA

	// who-trusts: both volume pods, by the agent's observation, and the ConfigMap's
	// keys; the env pod as one that may hold it.
	type answer struct {
		Items         []query.Holder    `json:"items"`
		NotObservable []query.Straggler `json:"notObservable"`
	}
	var who answer
	holds := func() []string {
		who = answer{}
		kubectlTrustsync(t, n, &who, "who-trusts", oldCA, "-n", ns)
		var out []string
		for _, h := range who.Items {
			if h.Kind != "" {
				out = append(out, h.Kind+"/"+h.Name+"/"+h.Key)
			} else {
				out = append(out, h.Pod+"/"+h.Delivery+"/"+h.Path)
			}
		}
		slices.Sort(out)
		return out
	}
	want := []string{"ConfigMap/annotated-ca/ca.pem", "ConfigMap/trust-ca/ca.pem", "ConfigMap/trust-ca/truststore.p12", "annotated/configMap//etc/trust/ca.pem",
		"java/configMap//etc/trust/cacerts", "volume/configMap//etc/trust/ca.pem", "volume/configMap//etc/trust/truststore.p12"}
	var got []string
	if err := wait.PollUntilContextTimeout(context.Background(), time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		got = holds()
		return slices.Equal(got, want), nil
	}); err != nil {
		report, _ := n.Run(context.Background(), "kubectl", "get", "nodetrustreports", "-o", "yaml")
		logs, _ := n.Run(context.Background(), "kubectl", "-n", releaseNamespace, "logs", "ds/trustsync-agent", "--tail=40")
		t.Fatalf("who-trusts lists %q; want %q\nthe reports:\n%s\nthe agent's log:\n%s", got, want, report, logs)
	}
	if len(who.NotObservable) != 1 || who.NotObservable[0].Pod != "env" || !strings.Contains(who.NotObservable[0].Detail, "ConfigMap trust-ca (ca.pem) through env") {
		t.Errorf("who-trusts' not observable: %+v; want the env pod, reading trust-ca's ca.pem through env", who.NotObservable)
	}

	// The rotation: the volume pod is behind until the kubelet refreshes its volume;
	// the env pod is named; nothing signs before the floor.
	requestRotation(t, n)
	poll.True(t, time.Minute, "a new CA waiting", func() bool { r = rotation(); return r.Phase == "Waiting" && r.NewCA != "" })
	newCA := r.NewCA
	if r.FloorUntil == nil || r.PublishedAt == nil || r.FloorUntil.Sub(*r.PublishedAt) != 2*time.Minute {
		t.Fatalf("rotation's floor: published %v, floor until %v; want the chart's default floor of 2m after publishing", r.PublishedAt, r.FloorUntil)
	}
	published, floorUntil := *r.PublishedAt, *r.FloorUntil
	if !slices.ContainsFunc(r.NotObservable, func(s query.Straggler) bool { return s.Namespace == ns && s.Pod == "env" }) {
		t.Errorf("rotation does not name the env pod as not observable: %+v", r.NotObservable)
	}
	reads := func(pod, file string) bool {
		out, err := n.Exec(context.Background(), ns, pod, "app", "cat", file)
		return err == nil && slices.Contains(anchorSet(t, out), newCA)
	}
	volumeBehind := false
	var fileHeld, stable time.Time
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) && stable.IsZero() {
		r = rotation()
		if fileHeld.IsZero() && reads("volume", "/etc/trust/ca.pem") {
			fileHeld = time.Now()
		}
		switch {
		case r.Phase == "Stable" && r.CurrentCA == newCA:
			stable = time.Now()
		case slices.ContainsFunc(r.Stragglers, func(s query.Straggler) bool { return s.Pod == "volume" && s.Reason == query.Behind }):
			volumeBehind = true
			if issuer := issuer(t, n, ns); issuer != oldCA {
				t.Errorf("a certificate issued while the volume pod lacks the new CA comes from %s, not the old CA %s", issuer, oldCA)
			}
		}
		time.Sleep(2 * time.Second)
	}
	switch {
	case stable.IsZero():
		t.Fatalf("the new CA did not sign within 5 minutes: %+v", r)
	case !volumeBehind:
		t.Errorf("the rotation never named the volume pod behind while the kubelet had not refreshed its ConfigMap")
	case fileHeld.IsZero() || fileHeld.After(stable):
		t.Errorf("the new CA signed (seen at %s) before the volume pod's file held it (seen at %s)", stable.Format(time.RFC3339), fileHeld.Format(time.RFC3339))
	case stable.Before(floorUntil):
		t.Errorf("the new CA signed at %s, before its floor %s, though a pod reads it through env", stable.Format(time.RFC3339), floorUntil.Format(time.RFC3339))
	}
	// The Java pod's PKCS#12 truststore, as the agent read it from the volume, holds
	// the new CA too: it was counted like the PEM file.
	var java []query.Holder
	kubectlTrustsync(t, n, &struct {
		Items *[]query.Holder `json:"items"`
	}{&java}, "who-trusts", newCA, "-n", ns)
	if !slices.ContainsFunc(java, func(h query.Holder) bool { return h.Pod == "java" && h.Path == "/etc/trust/cacerts" }) {
		t.Errorf("who-trusts the new CA once it signs: %+v; want the Java pod's truststore among them", java)
	}
	t.Logf("the volume pod's file held the new CA %.0fs after it was published; the new CA signed %.0fs after publishing (floor 2m)", fileHeld.Sub(published).Seconds(), stable.Sub(published).Seconds())

	// With no consumer left at all, seeing nobody is not everyone holding it: the next
	// new CA does not sign before the floor.
	for _, name := range []string{"volume", "java", "env", "annotated"} {
		if err := n.Client.CoreV1().Pods(ns).Delete(context.Background(), name, *metav1.NewDeleteOptions(0)); err != nil {
			t.Fatal(err)
		}
	}
	poll.True(t, time.Minute, "the pods gone", func() bool {
		pods, err := n.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0
	})
	requestRotation(t, n)
	poll.True(t, time.Minute, "another new CA waiting", func() bool { r = rotation(); return r.Phase == "Waiting" && r.NewCA != newCA })
	third, floor := r.NewCA, r.FloorUntil
	if floor == nil {
		t.Fatalf("the rotation says no floor: %+v", r)
	}
	floorHolds := r.Expected == 0 && len(r.NotObservable) == 0
	if !floorHolds {
		t.Logf("other pods select the bundle (%d observed, %d not observable): the floor is not what holds this rotation", r.Expected, len(r.NotObservable))
	}
	// Watched until it signs: the switch, whenever it comes, must come after the floor.
	poll.True(t, 4*time.Minute, "the third CA signing", func() bool { r = rotation(); return r.Phase == "Stable" && r.CurrentCA == third })
	if signed := time.Now(); floorHolds && signed.Before(*floor) {
		t.Errorf("with no consumer observed the new CA signed at %s, before its floor %s", signed.Format(time.RFC3339), floor.Format(time.RFC3339))
	}
}

// A container that drops one CA file into an existing directory with subPath never
// sees the file change: the kubelet binds it once, when the container starts. After a
// rotation publishes a new CA, the agent reads what each container sees, so the
// subPath reader is named Behind (and who-trusts does not list it with the new CA)
// while its neighbour mounting the directory holds it; it stays behind, as the
// container still reads the old file. An operator names it in the CA Secret, as
// signer.md teaches, and the rotation proceeds without it.
func TestConsumers_ASubPathReaderIsSeenAsItReadsAndCanBeSkipped(t *testing.T) {
	n := installChart(t)
	ns := n.Namespace(t, "subpath", restricted)
	live := map[string]any{"signerName": "trustsync.io/workload", "labelSelector": map[string]any{"matchLabels": map[string]any{liveLabel: "live"}}, "path": "ca.pem"}
	createTarget(t, n, "e2e-subpath", ns, "trust-ca", live)
	poll.True(t, time.Minute, "the TrustTarget's ConfigMap", func() bool {
		_, err := n.Client.CoreV1().ConfigMaps(ns).Get(context.Background(), "trust-ca", metav1.GetOptions{})
		return err == nil
	})
	mounting := func(name string, m corev1.VolumeMount) *corev1.Pod {
		pod := appPod(name, nil, 1000, "exec sleep 3600")
		pod.Spec.Volumes = []corev1.Volume{{Name: "trust", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "trust-ca"}}}}}
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{m}
		return pod
	}
	createPod(t, ns, mounting("directory", corev1.VolumeMount{Name: "trust", MountPath: "/etc/trust", ReadOnly: true}))
	createPod(t, ns, mounting("subpath", corev1.VolumeMount{Name: "trust", MountPath: "/etc/ssl/certs/corp.pem", SubPath: "ca.pem", ReadOnly: true}))
	for _, name := range []string{"directory", "subpath"} {
		n.WaitPod(t, ns, name, 2*time.Minute, "Ready", cluster.PodReady)
	}
	var r plugin.Rotation
	poll.True(t, time.Minute, "a stable rotation", func() bool { r = workloadRotation(t, n); return r.Phase == "Stable" })
	requestRotation(t, n)
	poll.True(t, time.Minute, "a new CA waiting", func() bool { r = workloadRotation(t, n); return r.Phase == "Waiting" && r.NewCA != "" })
	newCA := r.NewCA
	reads := func(pod, file string) bool {
		out, err := n.Exec(context.Background(), ns, pod, "app", "cat", file)
		return err == nil && slices.Contains(anchorSet(t, out), newCA)
	}
	poll.True(t, 3*time.Minute, "the directory's file holding the new CA, as the kubelet refreshes it", func() bool { return reads("directory", "/etc/trust/ca.pem") })
	behind := func(s query.Straggler) bool {
		return s.Namespace == ns && s.Pod == "subpath" && s.Reason == query.Behind && strings.Contains(s.Detail, "/etc/ssl/certs/corp.pem")
	}
	var who struct{ Items []query.Holder }
	poll.True(t, time.Minute, "the agent seeing the directory pod hold the new CA and the subPath pod behind", func() bool {
		r = workloadRotation(t, n)
		who.Items = nil
		kubectlTrustsync(t, n, &who, "who-trusts", newCA, "-n", ns)
		return slices.ContainsFunc(r.Stragglers, behind) && slices.ContainsFunc(who.Items, func(h query.Holder) bool { return h.Pod == "directory" })
	})
	if slices.ContainsFunc(who.Items, func(h query.Holder) bool { return h.Pod == "subpath" }) {
		t.Errorf("who-trusts the new CA lists the subPath pod, which cannot see it: %+v", who.Items)
	}
	if reads("subpath", "/etc/ssl/certs/corp.pem") {
		t.Fatal("the subPath container reads the new CA: the kubelet refreshed a subPath mount, and this test's premise is wrong")
	}

	if _, err := n.Run(context.Background(), "kubectl", "-n", releaseNamespace, "annotate", "secret", "trustsync-ca-trustsync.io-workload",
		"trustsync.io/rotation-skip-pods="+ns+"/subpath", "--overwrite"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = n.Run(context.Background(), "kubectl", "-n", releaseNamespace, "annotate", "secret", "trustsync-ca-trustsync.io-workload", "trustsync.io/rotation-skip-pods-")
	})
	poll.True(t, 3*time.Minute, "the new CA signing without the skipped pod", func() bool {
		r = workloadRotation(t, n)
		return r.Phase == "Stable" && r.CurrentCA == newCA
	})
}
