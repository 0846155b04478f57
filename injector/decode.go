package injector

import (
	"fmt"

	jsonv2 "github.com/go-json-experiment/json"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DecodePod decodes a pod under admission for Inject, reading only the fields Inject
// looks at. Decoding a whole Pod took most of /mutate/pods' CPU (docs/benchmarks.md),
// yet injection needs its annotations, its containers' names, mounts, environment and
// user, and the names of its volumes; the JSON scanner steps over the rest without
// building it. The pod returned holds those fields alone (nil and empty lists kept
// apart, as the patch's paths depend on it), so it is for Inject, not for anything
// that reads more. A field it skips is not type-checked either; the API server sends
// only pods it has decoded itself, so that costs nothing. It decodes with the JSON v2
// decoder (as the webhook decodes reviews; see decodeReview there), whose names are
// case-sensitive and unique, as in the JSON the API server writes.
//
// Whoever makes Inject (or Asks) read another field adds it here:
// TestDecodePod_InjectsAsTheFullPod runs every golden case through both decodings and
// fails on any difference. Volumes keep what Asks reads: projected clusterTrustBundle
// and podCertificate sources' signers and bundles, and csi.trustsync.io attributes.
func DecodePod(raw []byte) (*corev1.Pod, error) {
	var in admittedPod
	if err := jsonv2.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("failed to decode the pod under review: %w", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: in.Metadata.Name, GenerateName: in.Metadata.GenerateName, Annotations: in.Metadata.Annotations},
		Spec: corev1.PodSpec{
			InitContainers:               containersOf(in.Spec.InitContainers),
			Containers:                   containersOf(in.Spec.Containers),
			RestartPolicy:                in.Spec.RestartPolicy,
			AutomountServiceAccountToken: in.Spec.AutomountServiceAccountToken,
			ShareProcessNamespace:        in.Spec.ShareProcessNamespace,
			HostPID:                      in.Spec.HostPID,
			SecurityContext:              in.Spec.SecurityContext.pod(),
		},
	}
	if in.Spec.Volumes != nil {
		pod.Spec.Volumes = make([]corev1.Volume, len(in.Spec.Volumes))
		for i, v := range in.Spec.Volumes {
			pod.Spec.Volumes[i] = v.volume()
		}
	}
	if in.Spec.ImagePullSecrets != nil {
		pod.Spec.ImagePullSecrets = make([]corev1.LocalObjectReference, len(in.Spec.ImagePullSecrets))
		for i, s := range in.Spec.ImagePullSecrets {
			pod.Spec.ImagePullSecrets[i].Name = s.Name
		}
	}
	if in.Spec.EphemeralContainers != nil {
		pod.Spec.EphemeralContainers = make([]corev1.EphemeralContainer, len(in.Spec.EphemeralContainers))
		for i, c := range in.Spec.EphemeralContainers {
			pod.Spec.EphemeralContainers[i].Name = c.Name
		}
	}
	return pod, nil
}

// admittedPod is the part of a Pod that Inject reads, with the Pod's JSON names.
type admittedPod struct {
	Metadata struct {
		Name         string            `json:"name"`
		GenerateName string            `json:"generateName"`
		Annotations  map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Volumes                      []admittedVolume         `json:"volumes"`
		InitContainers               []admittedContainer      `json:"initContainers"`
		Containers                   []admittedContainer      `json:"containers"`
		EphemeralContainers          []named                  `json:"ephemeralContainers"`
		ImagePullSecrets             []named                  `json:"imagePullSecrets"`
		RestartPolicy                corev1.RestartPolicy     `json:"restartPolicy"`
		AutomountServiceAccountToken *bool                    `json:"automountServiceAccountToken"`
		ShareProcessNamespace        *bool                    `json:"shareProcessNamespace"`
		HostPID                      bool                     `json:"hostPID"`
		SecurityContext              *admittedSecurityContext `json:"securityContext"`
	} `json:"spec"`
}

type named struct {
	Name string `json:"name"`
}

// admittedVolume is a volume's name and the ways it may ask for trust.
type admittedVolume struct {
	Name      string `json:"name"`
	Projected *struct {
		Sources []struct {
			ClusterTrustBundle *corev1.ClusterTrustBundleProjection `json:"clusterTrustBundle"`
			PodCertificate     *struct {
				SignerName string `json:"signerName"`
			} `json:"podCertificate"`
		} `json:"sources"`
	} `json:"projected"`
	CSI *struct {
		Driver           string            `json:"driver"`
		VolumeAttributes map[string]string `json:"volumeAttributes"`
	} `json:"csi"`
}

func (v admittedVolume) volume() corev1.Volume {
	out := corev1.Volume{Name: v.Name}
	switch {
	case v.Projected != nil:
		out.Projected = &corev1.ProjectedVolumeSource{}
		for _, s := range v.Projected.Sources {
			p := corev1.VolumeProjection{ClusterTrustBundle: s.ClusterTrustBundle}
			if s.PodCertificate != nil {
				p.PodCertificate = &corev1.PodCertificateProjection{SignerName: s.PodCertificate.SignerName}
			}
			out.Projected.Sources = append(out.Projected.Sources, p)
		}
	case v.CSI != nil:
		out.CSI = &corev1.CSIVolumeSource{Driver: v.CSI.Driver, VolumeAttributes: v.CSI.VolumeAttributes}
	}
	return out
}

type admittedContainer struct {
	Name            string                   `json:"name"`
	Env             []admittedEnv            `json:"env"`
	VolumeMounts    []corev1.VolumeMount     `json:"volumeMounts"`
	SecurityContext *admittedSecurityContext `json:"securityContext"`
}

type admittedEnv struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type admittedSecurityContext struct {
	RunAsUser  *int64 `json:"runAsUser"`
	RunAsGroup *int64 `json:"runAsGroup"`
}

func (s *admittedSecurityContext) pod() *corev1.PodSecurityContext {
	if s == nil {
		return nil
	}
	return &corev1.PodSecurityContext{RunAsUser: s.RunAsUser, RunAsGroup: s.RunAsGroup}
}

func containersOf(in []admittedContainer) []corev1.Container {
	if in == nil {
		return nil
	}
	out := make([]corev1.Container, len(in))
	for i, c := range in {
		out[i] = corev1.Container{Name: c.Name, VolumeMounts: c.VolumeMounts}
		for _, e := range c.Env {
			out[i].Env = append(out[i].Env, corev1.EnvVar{Name: e.Name, Value: e.Value})
		}
		if c.SecurityContext != nil {
			out[i].SecurityContext = &corev1.SecurityContext{RunAsUser: c.SecurityContext.RunAsUser, RunAsGroup: c.SecurityContext.RunAsGroup}
		}
	}
	return out
}
