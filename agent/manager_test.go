package agent

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/agent/csi"
	"github.com/trustsync/trustsync/agent/store"
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
