package agent

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/agent/csi"
	"github.com/trustsync/trustsync/agent/store"
	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/tenancy/tenancytest"
)

func TestPodToken_TakesTheConfiguredAudienceOnly(t *testing.T) {
	tests := []struct {
		name, audience, raw string
		present             bool
		want, wantErr       string
	}{
		{name: "the API server's audience", audience: "", raw: `{"": {"token": "t1", "expirationTimestamp": "2026-01-01T00:00:00Z"}}`, present: true, want: "t1"},
		{name: "a named audience", audience: "trustsync.io", raw: `{"trustsync.io": {"token": "t2"}, "": {"token": "t1"}}`, present: true, want: "t2"},
		{name: "no token for the audience", audience: "trustsync.io", raw: `{"": {"token": "t1"}}`, present: true, wantErr: `no token for audience "trustsync.io"`},
		{name: "an empty token", audience: "", raw: `{"": {"token": ""}}`, present: true, wantErr: `no token for audience ""`},
		{name: "not the kubelet's JSON", audience: "", raw: `t1`, present: true, wantErr: "is not the kubelet's JSON map of tokens"},
		{name: "no tokens attribute", audience: "", present: false, wantErr: "the CSIDriver csi.trustsync.io must have tokenRequests"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &Manager{cfg: Config{TokenAudience: tc.audience}}
			got, err := m.podToken(csi.PublishRequest{Tokens: tc.raw, HasTokens: tc.present})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("podToken = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("podToken = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// The files belong to whoever the app runs as, as they would if the sidecar, running
// as the app, wrote them.
func TestAppOwner_IsTheUIDOfTheContainerMountingTheVolume(t *testing.T) {
	mount := []corev1.VolumeMount{{Name: "trustsync-anchors", MountPath: "/var/run/trust-anchors"}}
	tests := []struct {
		name string
		pod  corev1.PodSpec
		want *store.Owner
	}{
		{name: "the pod's runAsUser and runAsGroup", pod: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](2000)},
			Containers:      []corev1.Container{{Name: "app", VolumeMounts: mount}}}, want: &store.Owner{UID: 1000, GID: 2000}},
		{name: "the container's over the pod's", pod: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)},
			Containers: []corev1.Container{{Name: "other"}, {Name: "app", VolumeMounts: mount,
				SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](7), RunAsGroup: ptr.To[int64](8)}}}}, want: &store.Owner{UID: 7, GID: 8}},
		{name: "fsGroup when no runAsGroup", pod: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), FSGroup: ptr.To[int64](3000)},
			Containers:      []corev1.Container{{Name: "app", VolumeMounts: mount}}}, want: &store.Owner{UID: 1000, GID: 3000}},
		{name: "no uid said: the agent's", pod: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", VolumeMounts: mount}}}, want: nil},
		{name: "no container mounts it", pod: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)},
			Containers:      []corev1.Container{{Name: "app"}}}, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := appOwner(&corev1.Pod{Spec: tc.pod}, volumeName("/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/trustsync-anchors/mount"))
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Fatalf("appOwner = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The agent checks a volume's asks again at mount, as the webhook did at admission
// (whose failure policy may have let the pod through), and fails the mount with the
// same message.
func TestGranted_AVolumeAskingWhatItsNamespaceIsNotGrantedIsNotMounted(t *testing.T) {
	grants := tenancytest.New(t, map[string]v1alpha1.TrustPolicySpec{"team-a": {NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
		Bundles: []v1alpha1.BundleGrant{{Name: "corp-a"}},
		Signers: []v1alpha1.SignerGrant{{SignerName: "trustsync.io/workload", DNSNames: []string{"*.ten-a.svc"}}}}})
	grants.Labels["ten-a"] = map[string]string{"team": "a"}
	grants.Exempt, grants.Unknown = "trustsync-system", "unknown"
	volume := func(attrs string) contract.Spec {
		t.Helper()
		s, err := contract.SpecFromAttributes(map[string]string{contract.FlagSources: attrs}, "/files", "/state")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	withCert := volume(`[{"name": "corp-a", "path": "ca.pem"}]`)
	withCert.Certificate = &contract.Certificate{Signer: "trustsync.io/workload", DNSNames: []string{"api.ten-b.svc"}}
	tests := []struct {
		name, namespace string
		spec            contract.Spec
		wantErr         string
	}{
		{name: "a granted bundle mounts", namespace: "ten-a", spec: volume(`[{"name": "corp-a", "path": "ca.pem"}]`)},
		{name: "an ungranted bundle fails the mount, naming it and the command", namespace: "ten-a", spec: volume(`[{"name": "corp-b", "path": "ca.pem"}]`),
			wantErr: "volume roots (csi.trustsync.io): namespace ten-a may not trust bundle corp-b: no TrustPolicy grants it; kubectl trustsync grants -n ten-a"},
		{name: "a namespace no policy selects is granted nothing", namespace: "ten-b", spec: volume(`[{"name": "corp-a", "path": "ca.pem"}]`),
			wantErr: "namespace ten-b may not trust bundle corp-a"},
		{name: "a certificate for a name outside the pattern fails the mount", namespace: "ten-a", spec: withCert,
			wantErr: `namespace ten-a may not ask trustsync.io/workload for DNS names api.ten-b.svc: TrustPolicy team-a allows *.ten-a.svc but not "api.ten-b.svc"`},
		{name: "the agent's own namespace is exempt", namespace: "trustsync-system", spec: volume(`[{"name": "corp-b", "path": "ca.pem"}]`)},
		{name: "the public roots are always granted", namespace: "ten-b", spec: volume(`[{"defaultCAs": true, "path": "ca.pem"}]`)},
		{name: "grants that cannot be told fail the mount, saying why", namespace: "unknown", spec: volume(`[{"name": "corp-a", "path": "ca.pem"}]`),
			wantErr: "cannot tell what namespace unknown is granted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &Manager{cfg: Config{Grants: grants.Lookup}}
			err := m.granted(context.Background(), tc.namespace, tc.spec.Asks("volume roots (csi.trustsync.io)"))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("granted = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("granted = %v\nwant an error containing %s", err, tc.wantErr)
			}
		})
	}
	if err := (&Manager{}).granted(context.Background(), "ten-b", volume(`[{"name": "corp-b", "path": "ca.pem"}]`).Asks("v")); err != nil {
		t.Errorf("without enforcement a volume was refused: %v", err)
	}
}
