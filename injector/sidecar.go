package injector

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/delivery/contract"
)

// sidecarSpec builds the sidecar containers for one pod.
type sidecarSpec struct {
	req         *request
	cfg         Config
	volume      string
	stateVolume string // "" without a certificate
	tokenVolume string // "" unless the pod opts out of token automounting
	uid, gid    int64
}

// container returns the sidecar running subcommand ("run" or "init"). A restartable
// init container (Kubernetes' native sidecar) has restartPolicy Always and a startup
// probe that passes only once every non-optional file is written, so app containers
// start with their files present.
func (s sidecarSpec) container(name, subcommand string, restartableInit bool) corev1.Container {
	args := s.args()
	c := corev1.Container{
		Name:            name,
		Image:           s.cfg.image(),
		ImagePullPolicy: s.cfg.pullPolicy(),
		Command:         []string{sidecarBinary},
		Args:            append([]string{subcommand}, args...),
		Env: []corev1.EnvVar{
			fieldEnv(contract.EnvPodName, "metadata.name"),
			fieldEnv(contract.EnvPodNamespace, "metadata.namespace"),
			fieldEnv(contract.EnvPodUID, "metadata.uid"),
			fieldEnv(contract.EnvServiceAccount, "spec.serviceAccountName"),
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: s.req.resources.cpuRequest, corev1.ResourceMemory: s.req.resources.memoryRequest},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: s.req.resources.memoryLimit},
		},
		VolumeMounts:             s.mounts(),
		SecurityContext:          s.securityContext(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if restartableInit {
		c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		c.StartupProbe = &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: append([]string{sidecarBinary, "probe"}, args...)}},
			PeriodSeconds:    1,
			TimeoutSeconds:   5,
			FailureThreshold: 300,
		}
	}
	return c
}

// args are the sidecar's flags, as package contract renders them. Pod name,
// namespace, uid and ServiceAccount come from the environment (the downward API).
func (s sidecarSpec) args() []string {
	return contractSpec(s.req, s.cfg).Args()
}

// contractSpec is what the annotations ask for, as the sidecar's flags and the node
// agent's volume attributes both carry it.
func contractSpec(req *request, cfg Config) contract.Spec {
	spec := contract.Spec{Dir: req.mountPath, Sources: req.sources, Reload: req.reload, ExpiryWarningDays: cfg.expiryWarningDays()}
	if c := req.certificate; c != nil {
		spec.Certificate = &contract.Certificate{
			Signer: c.signer, KeyType: c.keyType, ExpirationSeconds: c.expirationSeconds, DNSNames: c.dnsNames,
			CredentialBundle: c.credentialBundle, TrustDomain: cfg.trustDomain(c.signer), StateDir: stateMountPath,
		}
	}
	return spec
}

func (s sidecarSpec) mounts() []corev1.VolumeMount {
	m := []corev1.VolumeMount{{Name: s.volume, MountPath: s.req.mountPath}}
	if s.stateVolume != "" {
		m = append(m, corev1.VolumeMount{Name: s.stateVolume, MountPath: stateMountPath})
	}
	if s.tokenVolume != "" {
		m = append(m, corev1.VolumeMount{Name: s.tokenVolume, MountPath: tokenMountPath, ReadOnly: true})
	}
	return m
}

// securityContext passes Pod Security "restricted" on its own, whatever the pod says.
func (s sidecarSpec) securityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsUser:                &s.uid,
		RunAsGroup:               &s.gid,
		RunAsNonRoot:             ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func fieldEnv(name, fieldPath string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fieldPath}}}
}

// stateVolume holds a pending private key across sidecar restarts (not pod restarts):
// memory-backed and mounted into the sidecar alone.
func stateVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi")),
	}}}
}

// tokenVolume gives the sidecar alone the API credentials a pod with
// automountServiceAccountToken: false withholds from its containers: the same
// projection the kubelet would mount.
func tokenVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To[int32](0o444),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		},
	}}}
}

// appUID is the uid the sidecar runs as: the app's, so files it writes (a key
// included) are the app's, taken from the first target container or else the pod;
// 65532 when neither says or the app runs as root (the sidecar never does).
func appUID(pod *corev1.Pod, targets []target) int64 {
	return nonRoot(targetID(pod, targets, userID))
}

// appGID is appUID's group.
func appGID(pod *corev1.Pod, targets []target) int64 {
	return nonRoot(targetID(pod, targets, groupID))
}

func nonRoot(id *int64) int64 {
	if id == nil || *id == 0 {
		return defaultUID
	}
	return *id
}
