package query

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/tenancy"
	"github.com/trustsync/trustsync/test/fixtures"
	"github.com/trustsync/trustsync/trustfiles"
)

func TestResolveAnchor_TakesAPEMFileAHashOrAUniquePrefix(t *testing.T) {
	a, b := fixtures.CA("resolve a"), fixtures.CA("resolve b")
	idA, idB := bundle.AnchorID(a.Cert.Raw), bundle.AnchorID(b.Cert.Raw)
	c := Cluster{Reports: []*v1alpha1.NodeTrustReport{{AnchorSets: []v1alpha1.AnchorSet{{ID: "s", Anchors: []string{idA, idB}, Count: 2}}}}}
	pemFile := filepath.Join(t.TempDir(), "a.pem")
	if err := os.WriteFile(pemFile, a.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "a.key")
	if err := os.WriteFile(keyFile, a.KeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	colons := ""
	for i := 0; i < len(idA); i += 2 {
		colons += strings.ToUpper(idA[i:i+2]) + ":"
	}
	for _, tc := range []struct {
		name, arg, want, wantErr string
	}{
		{name: "a PEM file is its certificate's anchor", arg: pemFile, want: idA},
		{name: "a whole SHA-256", arg: idA, want: idA},
		{name: "openssl's fingerprint, colons and capitals", arg: strings.TrimSuffix(colons, ":"), want: idA},
		{name: "a unique 12-digit prefix", arg: idB[:12], want: idB},
		{name: "a prefix under 12 digits is refused", arg: idA[:11], wantErr: "too short a prefix: give at least 12 hex digits"},
		{name: "a prefix nobody holds", arg: "000000000000", wantErr: "no anchor held by a pod or in a bundle starts with 000000000000"},
		{name: "neither file nor hex", arg: "corp-root", wantErr: `"corp-root" is neither a file nor a SHA-256 in hex`},
		{name: "a key file is not an anchor", arg: keyFile, wantErr: "is not a PEM file of certificates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.ResolveAnchor(tc.arg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || len(got) != 1 || got[0] != tc.want {
				t.Fatalf("got %v, %v; want [%s]", got, err, tc.want)
			}
		})
	}
}

// projected is a running pod on node reading bundle name through the kubelet.
func projected(name, node, bundleName string, started bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node, Volumes: []corev1.Volume{{Name: "roots", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: &bundleName, Path: "ca.pem"}}}}}}}}}
	if started {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	}
	return p
}

func nodeReport(node string, anchor string, pods ...*corev1.Pod) *v1alpha1.NodeTrustReport {
	set := v1alpha1.AnchorSetID([]string{anchor})
	r := &v1alpha1.NodeTrustReport{ObjectMeta: metav1.ObjectMeta{Name: node}, Node: node, AnchorSets: []v1alpha1.AnchorSet{{ID: set, Anchors: []string{anchor}, Count: 1}}}
	for _, p := range pods {
		r.Pods = append(r.Pods, v1alpha1.PodHolding{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID),
			Files: []v1alpha1.FileHolding{{Path: "/roots/ca.pem", Volume: "roots", File: "ca.pem", Delivery: "native", AnchorSet: set}}})
	}
	return r
}

func TestWhoTrustsAndUnseen_AReportSpeaksForItsNodeAndNobodyMeansEveryoneWasSeen(t *testing.T) {
	anchor := bundle.AnchorID(fixtures.CA("who").Cert.Raw)
	onA, onB, onC, never := projected("on-a", "a", "b1", true), projected("on-b", "b", "b1", true), projected("on-c", "c", "b1", true), projected("never", "a", "b1", false)
	c := Cluster{Pods: []*corev1.Pod{onA, onB, onC, never},
		// Node a's report also claims the pod node b runs.
		Reports:    []*v1alpha1.NodeTrustReport{nodeReport("a", anchor, onA, onB)},
		Unreadable: map[string]string{"b": "report of node b unreadable: bad"},
	}
	holders := c.WhoTrusts(anchor, "")
	if len(holders) != 1 || holders[0].Pod != "on-a" {
		t.Errorf("holders %+v; want on-a alone: a report speaks for its own node's pods", holders)
	}
	unseen := c.Unseen("")
	if len(unseen) != 2 || unseen[0].Node != "b" || unseen[0].Reason != "report of node b unreadable: bad" || unseen[1].Node != "c" || !strings.HasPrefix(unseen[1].Reason, "no report from node c") {
		t.Errorf("unseen %+v; want node b (unreadable) and node c (no report), not the pod that never started", unseen)
	}
	everyone := Cluster{Pods: []*corev1.Pod{onA, never}, Reports: c.Reports}
	if u := everyone.Unseen(""); len(u) != 0 {
		t.Errorf("every running pod was seen, yet unseen is %+v", u)
	}
}

func TestProgress_APodThatNeverStartedHoldsNoRotationBack(t *testing.T) {
	newCA := bundle.AnchorID(fixtures.CA("progress").Cert.Raw)
	b := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "b1"}}
	running, pending := projected("running", "a", "b1", true), projected("pending", "a", "b1", false)
	c := Cluster{Pods: []*corev1.Pod{running, pending}, Reports: []*v1alpha1.NodeTrustReport{nodeReport("a", newCA, running)}}
	p := c.Progress(newCA, []*certificatesv1.ClusterTrustBundle{b})
	if p.Holding != 1 || p.Expected != 1 || len(p.NotStarted) != 1 || p.NotStarted[0] != "ns/pending" {
		t.Errorf("progress %+v; want 1 of 1, ns/pending not started", p)
	}
}

// A peer's anchors have reached a pod only when it holds every one of them: a pod
// holding the old anchor alone is behind, one not observed is not counted as holding.
func TestHoldingAll_APodHoldsASetOnlyWhenItHoldsEveryAnchor(t *testing.T) {
	old, next := bundle.AnchorID(fixtures.CA("old").Cert.Raw), bundle.AnchorID(fixtures.CA("next").Cert.Raw)
	b := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "b1"}}
	both, oldOnly, unseen := projected("both", "a", "b1", true), projected("old-only", "b", "b1", true), projected("unseen", "c", "b1", true)
	r := nodeReport("a", old, both)
	r.AnchorSets = []v1alpha1.AnchorSet{{ID: v1alpha1.AnchorSetID([]string{old, next}), Anchors: []string{old, next}, Count: 1}}
	r.Pods[0].Files[0].AnchorSet = r.AnchorSets[0].ID
	c := Cluster{Pods: []*corev1.Pod{both, oldOnly, unseen}, Reports: []*v1alpha1.NodeTrustReport{r, nodeReport("b", old, oldOnly)}}
	if holding, expected := c.HoldingAll([]string{old, next}, []*certificatesv1.ClusterTrustBundle{b}); holding != 1 || expected != 3 {
		t.Errorf("holding %d of %d; want 1 of 3 (old-only behind, unseen not observed)", holding, expected)
	}
	if holding, expected := c.HoldingAll([]string{old}, []*certificatesv1.ClusterTrustBundle{b}); holding != 2 || expected != 3 {
		t.Errorf("the old anchor alone: holding %d of %d; want 2 of 3", holding, expected)
	}
}

// A file's change time is believed only when it is not after the report that tells
// of it: a far-future changedAt is not known, never a latency of centuries.
func TestStatus_AChangeAfterItsReportIsNotKnown(t *testing.T) {
	anchor := bundle.AnchorID(fixtures.CA("status").Cert.Raw)
	b := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "b1"}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: string(fixtures.CA("unused").CertPEM())}}
	written := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		changedAt time.Time
		known     bool
	}{
		{"before the report", written.Add(-time.Minute), true},
		{"within the second the report's time is cut to", written.Add(900 * time.Millisecond), true},
		{"far in the future", time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := projected("p", "a", "b1", true)
			r := nodeReport("a", anchor, pod)
			r.UpdatedAt = metav1.NewTime(written)
			changed := metav1.NewMicroTime(tc.changedAt)
			r.Pods[0].Files[0].ChangedAt = &changed
			c := Cluster{Pods: []*corev1.Pod{pod}, Reports: []*v1alpha1.NodeTrustReport{r}, Bundles: []*certificatesv1.ClusterTrustBundle{b},
				Changed: map[string]time.Time{"b1": written.Add(-time.Hour)}}
			st := c.Status()
			if len(st) != 1 {
				t.Fatalf("status %+v", st)
			}
			if known := st[0].ChangedAt != nil; known != tc.known {
				t.Errorf("changedAt known %v (%v), want %v", known, st[0].ChangedAt, tc.known)
			}
			if st[0].CaughtUpAfter != nil && *st[0].CaughtUpAfter > 3600*24 {
				t.Errorf("caught up %.0fs after the change", float64(*st[0].CaughtUpAfter))
			}
		})
	}
}

// trustCM is the TrustTarget ConfigMap trust-ca in namespace ns: ca.pem and a PKCS#12
// store, both of bundle name.
func trustCM(bundleName string) trustfiles.Objects {
	objs := trustfiles.Objects{}
	objs.Add(&trustfiles.Object{Kind: v1alpha1.KindConfigMap, Namespace: "ns", Name: "trust-ca", Writer: "TrustTarget corp", Keys: []trustfiles.Key{
		{Key: "ca.pem", Format: "pem", Sources: []v1alpha1.Source{{Name: bundleName, Path: "ca.pem"}}},
		{Key: "trust.p12", Format: "pkcs12", Sources: []v1alpha1.Source{{Name: bundleName, Path: "trust.p12", Format: "pkcs12"}}},
	}})
	return objs
}

func TestProgress_TheObjectsATrustTargetWritesAreWaitedForByItsStatus(t *testing.T) {
	oldCA, newCA := fixtures.CA("objects old"), fixtures.CA("objects new")
	oldID, newID := bundle.AnchorID(oldCA.Cert.Raw), bundle.AnchorID(newCA.Cert.Raw)
	corp := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "corp"}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: fixtures.Bundle(oldCA, newCA)}}
	target := func(source string, status v1alpha1.TrustTargetStatus) *v1alpha1.TrustTarget {
		return &v1alpha1.TrustTarget{ObjectMeta: metav1.ObjectMeta{Name: "roots"}, Spec: v1alpha1.TrustTargetSpec{
			Sources: []v1alpha1.Source{{Name: source, Path: "ca.pem"}}, Target: v1alpha1.Target{ConfigMap: &v1alpha1.ObjectRef{Name: "trust-ca"}}}, Status: status}
	}
	for _, tc := range []struct {
		name   string
		target *v1alpha1.TrustTarget
		want   string // holding/expected and why, "" for not counted
		done   bool
	}{
		{name: "every namespace synced with content holding the new CA holds it",
			target: target("corp", v1alpha1.TrustTargetStatus{Namespaces: 3, Synced: 3, Anchors: []string{newID, oldID}}), want: "3/3 ", done: true},
		{name: "content without the new CA holds it nowhere, however synced",
			target: target("corp", v1alpha1.TrustTargetStatus{Namespaces: 3, Synced: 3, Anchors: []string{oldID}}), want: "0/3 its content does not hold it yet"},
		{name: "a namespace not written is behind, named with why",
			target: target("corp", v1alpha1.TrustTargetStatus{Namespaces: 3, Synced: 2, Anchors: []string{oldID, newID},
				Failures: []v1alpha1.NamespaceFailure{{Namespace: "team-a", Message: "conflict"}}}), want: "2/3 not written in 1 of them, first team-a: conflict"},
		{name: "a target of another bundle is not waited for",
			target: target("other", v1alpha1.TrustTargetStatus{Namespaces: 3, Synced: 3, Anchors: []string{oldID}}), want: "", done: true},
		{name: "a target that selects no namespace writes nothing to wait for",
			target: target("corp", v1alpha1.TrustTargetStatus{}), want: "", done: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Cluster{Targets: []*v1alpha1.TrustTarget{tc.target}}.Progress(newID, []*certificatesv1.ClusterTrustBundle{corp})
			got := ""
			for _, o := range p.Objects {
				if o.Kind != v1alpha1.KindConfigMap || o.Name != "trust-ca" || o.Writer != "TrustTarget roots" {
					t.Errorf("object %+v, want ConfigMap trust-ca of TrustTarget roots", o)
				}
				got += fmt.Sprintf("%d/%d %s", o.Holding, o.Expected, o.Detail)
			}
			if got != tc.want {
				t.Errorf("objects %q; want %q", got, tc.want)
			}
			if p.Done() != tc.done {
				t.Errorf("done %v with no pod and objects %q; want %v", p.Done(), got, tc.done)
			}
		})
	}
}

func TestProgress_AnnotatedObjectsAreWaitedForByTheControllersIndex(t *testing.T) {
	oldCA, newCA := fixtures.CA("index old"), fixtures.CA("index new")
	oldID, newID := bundle.AnchorID(oldCA.Cert.Raw), bundle.AnchorID(newCA.Cert.Raw)
	corp := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "corp"}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: fixtures.Bundle(oldCA, newCA)}}
	object := func(kind, ns, bundleName string, anchors ...string) v1alpha1.InjectedObject {
		return v1alpha1.InjectedObject{Kind: kind, Namespace: ns, Name: "x", Sources: []v1alpha1.Source{{Name: bundleName, Path: "ca.pem"}}, Anchors: anchors}
	}
	for _, tc := range []struct {
		name       string
		index      *v1alpha1.InjectedIndex
		want       string // each counted object: kind namespace holding/expected detail
		unobserved string
		done       bool
	}{
		{name: "no index read counts nothing and hides nothing", done: true},
		{name: "a caBundle holding the new CA holds it",
			index: &v1alpha1.InjectedIndex{Objects: []v1alpha1.InjectedObject{object("ValidatingWebhookConfiguration", "", "corp", newID, oldID)}},
			want:  "ValidatingWebhookConfiguration  1/1 ;", done: true},
		{name: "an annotated ConfigMap without the new CA holds the rotation back",
			index: &v1alpha1.InjectedIndex{Objects: []v1alpha1.InjectedObject{object(v1alpha1.KindConfigMap, "apps", "corp", oldID)}},
			want:  "ConfigMap apps 0/1 its content does not hold it yet;"},
		{name: "an object filled from another bundle is not waited for",
			index: &v1alpha1.InjectedIndex{Objects: []v1alpha1.InjectedObject{object(v1alpha1.KindConfigMap, "apps", "other", oldID)}}, done: true},
		{name: "objects the full index leaves out are named as not observable",
			index:      &v1alpha1.InjectedIndex{Omitted: 7},
			unobserved: "7 annotated objects are not in the controller's index (it is full): their readers are not observed", done: true},
		{name: "an index that does not read is named",
			index:      &v1alpha1.InjectedIndex{Unreadable: "bad JSON"},
			unobserved: "the controller's index of annotated objects does not read in full (bad JSON): the readers of what it leaves out are not observed", done: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Cluster{Injected: tc.index}.Progress(newID, []*certificatesv1.ClusterTrustBundle{corp})
			got := ""
			for _, o := range p.Objects {
				if o.Writer != v1alpha1.WriterAnnotation || o.Name != "x" {
					t.Errorf("object %+v; want x, written by annotation", o)
				}
				got += fmt.Sprintf("%s %s %d/%d %s;", o.Kind, o.Namespace, o.Holding, o.Expected, o.Detail)
			}
			if got != tc.want {
				t.Errorf("objects %q; want %q", got, tc.want)
			}
			if u := strings.Join(p.Unobserved, "; "); u != tc.unobserved {
				t.Errorf("unobserved %q; want %q", u, tc.unobserved)
			}
			if p.Done() != tc.done {
				t.Errorf("done %v; want %v", p.Done(), tc.done)
			}
		})
	}
}

func TestProgress_EveryConsumerOfATrustObjectCounts(t *testing.T) {
	oldCA, newCA := fixtures.CA("consumers old"), fixtures.CA("consumers new")
	oldID, newID := bundle.AnchorID(oldCA.Cert.Raw), bundle.AnchorID(newCA.Cert.Raw)
	corp := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "corp"}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: fixtures.Bundle(oldCA, newCA)}}
	other := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "other"}}
	running := func(p *corev1.Pod) *corev1.Pod {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		return p
	}
	pod := func(name string, spec corev1.PodSpec) *corev1.Pod {
		spec.NodeName = "n"
		return running(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}, Spec: spec})
	}
	volume := func(items ...corev1.KeyToPath) corev1.PodSpec {
		return corev1.PodSpec{Containers: []corev1.Container{{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "trust", MountPath: "/etc/trust"}}}},
			Volumes: []corev1.Volume{{Name: "trust", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "trust-ca"}, Items: items}}}}}
	}
	env := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Env: []corev1.EnvVar{{Name: "CA", ValueFrom: &corev1.EnvVarSource{
		ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "trust-ca"}, Key: "ca.pem"}}}}}}}
	report := func(files map[string][]string, pods ...*corev1.Pod) *v1alpha1.NodeTrustReport {
		r := &v1alpha1.NodeTrustReport{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Node: "n"}
		for _, p := range pods {
			ph := v1alpha1.PodHolding{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
			for file, anchors := range files {
				set := v1alpha1.AnchorSetID(anchors)
				r.AnchorSets = append(r.AnchorSets, v1alpha1.AnchorSet{ID: set, Anchors: anchors, Count: len(anchors)})
				ph.Files = append(ph.Files, v1alpha1.FileHolding{Volume: "trust", File: file, Delivery: "configMap", AnchorSet: set})
			}
			r.Pods = append(r.Pods, ph)
		}
		slices.SortFunc(r.AnchorSets, func(a, b v1alpha1.AnchorSet) int { return strings.Compare(a.ID, b.ID) })
		r.AnchorSets = slices.CompactFunc(r.AnchorSets, func(a, b v1alpha1.AnchorSet) bool { return a.ID == b.ID })
		return r
	}
	both, old := []string{oldID, newID}, []string{oldID}
	for _, tc := range []struct {
		name          string
		pod           *corev1.Pod
		files         map[string][]string
		bundles       []*certificatesv1.ClusterTrustBundle
		want          string // holding/expected
		straggler     string
		notObservable string
	}{
		{name: "a configMap volume whose files hold the new anchor holds it",
			pod: pod("volume", volume()), files: map[string][]string{"ca.pem": both, "trust.p12": both}, want: "1/1"},
		{name: "a configMap volume the kubelet has not refreshed is behind, named by its path",
			pod: pod("stale", volume()), files: map[string][]string{"ca.pem": old, "trust.p12": both}, want: "0/1", straggler: "Behind /etc/trust/ca.pem does not hold it"},
		{name: "a PKCS#12 truststore counts like a PEM file",
			pod: pod("java", volume(corev1.KeyToPath{Key: "trust.p12", Path: "cacerts"})), files: map[string][]string{"cacerts": old}, want: "0/1", straggler: "Behind /etc/trust/cacerts does not hold it"},
		{name: "a pod of the object not yet in its node's report is not observed",
			pod: pod("unreported", volume()), want: "0/1", straggler: "NotObserved /etc/trust/ca.pem: not in node n's report yet"},
		{name: "env is not observable: the pod is named and not counted",
			pod: pod("env", env), want: "0/0", notObservable: "container app reads ConfigMap trust-ca (ca.pem) through env"},
		{name: "a reader of an object selecting another bundle is nobody this rotation waits for",
			pod: pod("elsewhere", volume()), files: map[string][]string{"ca.pem": old}, bundles: []*certificatesv1.ClusterTrustBundle{other}, want: "0/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Cluster{Pods: []*corev1.Pod{tc.pod}, Objects: trustCM("corp")}
			if tc.files != nil {
				c.Reports = []*v1alpha1.NodeTrustReport{report(tc.files, tc.pod)}
			} else {
				c.Reports = []*v1alpha1.NodeTrustReport{{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Node: "n"}}
			}
			bundles := tc.bundles
			if bundles == nil {
				bundles = []*certificatesv1.ClusterTrustBundle{corp}
			}
			p := c.Progress(newID, bundles)
			if got := fmt.Sprintf("%d/%d", p.Holding, p.Expected); got != tc.want {
				t.Errorf("holding %s; want %s (%+v)", got, tc.want, p)
			}
			straggler := ""
			if len(p.Stragglers) > 0 {
				straggler = p.Stragglers[0].Reason + " " + p.Stragglers[0].Detail
			}
			if straggler != tc.straggler {
				t.Errorf("straggler %q; want %q", straggler, tc.straggler)
			}
			notObservable := ""
			if len(p.NotObservable) > 0 {
				notObservable = p.NotObservable[0].Detail
			}
			if !strings.HasPrefix(notObservable, tc.notObservable) || (tc.notObservable == "") != (notObservable == "") {
				t.Errorf("not observable %q; want %q", notObservable, tc.notObservable)
			}
		})
	}
}

func TestObjectsHolding_ListsTheKeysOfObjectsHoldingAnAnchor(t *testing.T) {
	c := Cluster{Contents: []ObjectContent{
		{Kind: "ConfigMap", Namespace: "b", Name: "trust-ca", Key: "ca.pem", Writer: "TrustTarget corp", Anchors: []string{"x", "y"}},
		{Kind: "ConfigMap", Namespace: "a", Name: "trust-ca", Key: "ca.pem", Writer: "TrustTarget corp", Anchors: []string{"y"}},
		{Kind: "ValidatingWebhookConfiguration", Name: "hook", Key: "webhooks[0].clientConfig.caBundle", Writer: "annotation", Anchors: []string{"y"}},
		{Kind: "Secret", Namespace: "a", Name: "other", Key: "ca.pem", Writer: "annotation", Anchors: []string{"z"}},
	}}
	var got []string
	for _, o := range c.ObjectsHolding("y", "") {
		if o.Pod != "" || o.Key == "" {
			t.Errorf("an object holder %+v names a pod or no key", o)
		}
		got = append(got, o.Namespace+"/"+o.Kind+"/"+o.Name)
	}
	if want := []string{"/ValidatingWebhookConfiguration/hook", "a/ConfigMap/trust-ca", "b/ConfigMap/trust-ca"}; !slices.Equal(got, want) {
		t.Errorf("holding y: %v; want %v", got, want)
	}
	if got := c.ObjectsHolding("y", "b"); len(got) != 1 || got[0].Namespace != "b" {
		t.Errorf("holding y in b: %+v; want b's ConfigMap alone", got)
	}
}

// A file or object is flagged for an anchor its namespace is no longer granted: some
// bundle holds it and none that the namespace is granted does. An anchor from
// elsewhere (no bundle holds it) and a namespace without grants to compare (exempt,
// or no TrustPolicy) are never flagged.
func TestUngranted_NamesTheAnchorsNoGrantedBundleHolds(t *testing.T) {
	a, b, shared, own := fixtures.CA("granted a"), fixtures.CA("ungranted b"), fixtures.CA("in both"), fixtures.CA("own configmap")
	id := func(c *fixtures.Cert) string { return bundle.AnchorID(c.Cert.Raw) }
	ctb := func(name string, certs ...*fixtures.Cert) *certificatesv1.ClusterTrustBundle {
		return &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: fixtures.Bundle(certs...)}}
	}
	spec, err := v1alpha1.ParseTrustPolicySpec(&v1alpha1.TrustPolicySpec{NamespaceSelector: &metav1.LabelSelector{}, Bundles: []v1alpha1.BundleGrant{{Name: "corp-a"}}})
	if err != nil {
		t.Fatal(err)
	}
	policies := []tenancy.Policy{{Name: "all", Spec: spec}}
	c := Cluster{Bundles: []*certificatesv1.ClusterTrustBundle{ctb("corp-a", a, shared), ctb("corp-b", b, shared)},
		Grants: map[string]tenancy.Grants{"apps": tenancy.For(policies, "apps", nil)}}
	all := []string{id(a), id(b), id(shared), id(own)}
	for _, tc := range []struct {
		name      string
		cluster   Cluster
		namespace string
		want      []string
	}{
		{name: "only the anchor no granted bundle holds", cluster: c, namespace: "apps", want: []string{id(b)}},
		{name: "a namespace without grants to compare (exempt) is never flagged", cluster: c, namespace: "trustsync-system"},
		{name: "without TrustPolicies nothing is flagged", cluster: Cluster{Bundles: c.Bundles}, namespace: "apps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cluster.Ungranted(tc.namespace, all); !slices.Equal(got, tc.want) {
				t.Errorf("Ungranted = %v, want %v", got, tc.want)
			}
		})
	}
}

// Under TrustPolicies a pod of a namespace not granted the bundle holds no rotation
// back, whatever its annotations say it reads: it is named, not waited for. An exempt
// namespace (absent from the grants) and a granted one are waited for.
func TestProgress_APodOfANamespaceNotGrantedTheBundleIsNotWaitedFor(t *testing.T) {
	newCA := bundle.AnchorID(fixtures.CA("granted").Cert.Raw)
	b := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "b1"}}
	in := func(p *corev1.Pod, ns string) *corev1.Pod { p.Namespace = ns; return p }
	granted, ungranted, exempt := in(projected("granted", "a", "b1", true), "apps"), in(projected("forged", "a", "b1", true), "tenant"), in(projected("own", "a", "b1", true), "trustsync")
	spec, err := v1alpha1.ParseTrustPolicySpec(&v1alpha1.TrustPolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "apps"}}, Bundles: []v1alpha1.BundleGrant{{Name: "b1"}}})
	if err != nil {
		t.Fatal(err)
	}
	policies := []tenancy.Policy{{Name: "apps", Spec: spec}}
	c := Cluster{Pods: []*corev1.Pod{granted, ungranted, exempt}, Reports: []*v1alpha1.NodeTrustReport{nodeReport("a", "0000", granted, ungranted, exempt)},
		Grants: map[string]tenancy.Grants{"apps": tenancy.For(policies, "apps", map[string]string{"team": "apps"}), "tenant": tenancy.For(policies, "tenant", map[string]string{})}}
	p := c.Progress(newCA, []*certificatesv1.ClusterTrustBundle{b})
	if p.Expected != 2 || len(p.Stragglers) != 2 || !slices.Equal(p.NotGranted, []string{"tenant/forged"}) {
		t.Errorf("progress %+v; want apps/granted and trustsync/own waited for, tenant/forged named as not granted", p)
	}
}

// An operator may tell a rotation not to wait for named stragglers (a pod, or every
// pod of a namespace): they are moved to Skipped and no longer counted.
func TestProgress_SkipStopsWaitingForTheNamedStragglersAlone(t *testing.T) {
	p := Progress{Holding: 1, Expected: 4, Stragglers: []Straggler{{Namespace: "a", Pod: "stuck", Reason: Behind}, {Namespace: "b", Pod: "x", Reason: NotObserved}, {Namespace: "c", Pod: "y", Reason: Behind}},
		NotObservable: []Straggler{{Namespace: "b", Pod: "env", Reason: NotObservable}}}
	p.Skip([]string{"a/stuck", "b/*"})
	if p.Expected != 2 || len(p.Stragglers) != 1 || p.Stragglers[0].Pod != "y" || len(p.NotObservable) != 0 || len(p.Skipped) != 3 {
		t.Errorf("progress %+v; want c/y alone waited for, a/stuck, b/env and b/x skipped", p)
	}
	if p.Done() {
		t.Error("a straggler not named was skipped")
	}
}
