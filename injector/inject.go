package injector

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/tenancy"
)

// Why a pod is left alone.
const (
	SkipNotRequested          = "not requested"
	SkipSystemNamespace       = "system namespace"
	SkipOwnNamespace          = "injector namespace"
	SkipAlreadyInjected       = "already injected"
	sidecarBinary             = "/trustsync-sidecar"
	stateMountPath            = "/var/run/trustsync-state"
	tokenMountPath            = "/var/run/secrets/kubernetes.io/serviceaccount"
	defaultUID          int64 = 65532
)

// Result is what Inject decided for one pod.
type Result struct {
	// Skipped says why the pod is left alone; empty when it is injected.
	Skipped string
	// Patch injects the pod. It only adds.
	Patch []PatchOp
	// Warnings tell the pod's author what the injection cannot do for this pod.
	Warnings []string
	// Asks are what the pod's annotations ask for (Asks says every way), for a
	// tenancy check without parsing them again.
	Asks []tenancy.Ask
}

// RefusalError says why a pod that asked for trust cannot get it: a bad annotation, or
// a conflict with the pod's own spec. Its message names the annotation, the value and
// what is allowed, in the API server's words.
type RefusalError struct {
	PodName string
	Errs    field.ErrorList
}

func (e *RefusalError) Error() string {
	return apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, e.PodName, e.Errs).Error()
}

// Inject decides what pod, created in namespace, gets. nsAnnotations are the
// namespace's annotations, defaults for the pod's own.
func Inject(pod *corev1.Pod, namespace string, nsAnnotations map[string]string, cfg Config) (*Result, error) {
	name := pod.Name
	if name == "" {
		name = pod.GenerateName
	}
	v, ok := pod.Annotations[v1alpha1.AnnotationInject]
	if !ok {
		return &Result{Skipped: SkipNotRequested}, nil
	}
	switch v {
	case "true":
	case "false":
		return &Result{Skipped: SkipNotRequested}, nil
	default:
		return nil, &RefusalError{PodName: name, Errs: field.ErrorList{field.NotSupported(annotationPath(v1alpha1.AnnotationInject), v, []string{"true", "false"})}}
	}
	if reason := cfg.NamespaceSkipped(namespace); reason != "" {
		return &Result{Skipped: reason}, nil
	}
	req, errs := parseRequest(effectiveAnnotations(pod.Annotations, nsAnnotations), cfg)
	if raw, done := pod.Annotations[v1alpha1.AnnotationStatus]; done {
		return reinvoke(pod, raw, req, errs), nil
	}
	if len(errs) > 0 {
		return nil, &RefusalError{PodName: name, Errs: errs}
	}
	targets, errs := targetContainers(pod, req, "")
	if len(errs) == 0 && req.reload != nil && req.delivery != v1alpha1.DeliveryNative {
		errs = resolveReload(pod, req, targets)
	}
	if len(errs) > 0 {
		return nil, &RefusalError{PodName: name, Errs: errs}
	}
	ops, warnings := build(pod, req, targets, cfg)
	warnings = append(unknownAnnotationWarnings(pod.Annotations, nsAnnotations), warnings...)
	return &Result{Patch: ops, Warnings: warnings, Asks: req.asks()}, nil
}

// reinvoke handles a pod injected before: the API server calls again (reinvocation)
// when another plugin changed it, or a stored injected pod is sent anew. Only app
// containers added since, which lack the volume, get their mount; nothing is ever
// injected twice, and nothing is refused at this point.
func reinvoke(pod *corev1.Pod, rawStatus string, req *request, errs field.ErrorList) *Result {
	var st v1alpha1.InjectionStatus
	if len(errs) > 0 || json.Unmarshal([]byte(rawStatus), &st) != nil || st.Volume == "" {
		return &Result{Skipped: SkipAlreadyInjected}
	}
	req.mountPath = st.MountPath
	targets, errs := targetContainers(pod, req, st.Volume)
	if len(errs) > 0 {
		return &Result{Skipped: SkipAlreadyInjected}
	}
	p := &patch{}
	for _, t := range targets {
		if t.c.Name == st.Sidecar || hasMount(t.c, st.Volume) {
			continue
		}
		mountInto(p, t, req, st.Volume)
	}
	if len(p.ops) == 0 {
		return &Result{Skipped: SkipAlreadyInjected}
	}
	return &Result{Patch: p.ops}
}

func hasMount(c *corev1.Container, volume string) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return true
		}
	}
	return false
}

// mountInto adds the trust volume (and SSL_CERT_FILE, when asked) to one app container.
func mountInto(p *patch, t target, req *request, volume string) {
	appendItems(p, t.path()+"/volumeMounts", t.c.VolumeMounts != nil, corev1.VolumeMount{Name: volume, MountPath: req.mountPath, ReadOnly: true})
	if req.sslCertFile != "" && !hasEnv(t.c, "SSL_CERT_FILE") {
		appendItems(p, t.path()+"/env", t.c.Env != nil, corev1.EnvVar{Name: "SSL_CERT_FILE", Value: path.Join(req.mountPath, req.sslCertFile)})
	}
}

// target is an app container that gets the mount.
type target struct {
	init  bool
	index int
	c     *corev1.Container
}

func (t target) path() string {
	if t.init {
		return "/spec/initContainers/" + strconv.Itoa(t.index)
	}
	return "/spec/containers/" + strconv.Itoa(t.index)
}

// targetContainers resolves trustsync.io/containers (default: every app container) and
// refuses what would break the pod: an unknown name, another volume already mounted at
// the mount path, an SSL_CERT_FILE already set to something else. ownVolume is the
// trust volume of an earlier injection, whose mounts are no clash.
func targetContainers(pod *corev1.Pod, req *request, ownVolume string) ([]target, field.ErrorList) {
	var all []target
	for i := range pod.Spec.InitContainers {
		all = append(all, target{init: true, index: i, c: &pod.Spec.InitContainers[i]})
	}
	for i := range pod.Spec.Containers {
		all = append(all, target{index: i, c: &pod.Spec.Containers[i]})
	}
	var targets []target
	var errs field.ErrorList
	if req.containers == nil {
		for _, t := range all {
			if !t.init {
				targets = append(targets, t)
			}
		}
	} else {
		for _, name := range req.containers {
			i := indexOf(all, name)
			if i < 0 {
				errs = append(errs, field.Invalid(annotationPath(AnnotationContainers), name, "names no container of this pod; it has: "+strings.Join(containerNames(all), ", ")))
				continue
			}
			targets = append(targets, all[i])
		}
	}
	if len(targets) == 0 && len(errs) == 0 {
		// The API server refuses such a pod, but only after mutating admission, so
		// the injector sees it first.
		errs = append(errs, field.Required(field.NewPath("spec", "containers"), "the pod has no container to mount the trust files into; add one, or drop "+v1alpha1.AnnotationInject))
	}
	sslValue := path.Join(req.mountPath, req.sslCertFile)
	for _, t := range targets {
		for _, m := range t.c.VolumeMounts {
			if m.MountPath == req.mountPath && m.Name != ownVolume {
				errs = append(errs, field.Invalid(annotationPath(AnnotationMountPath), req.mountPath,
					fmt.Sprintf("container %q already mounts volume %q there; choose another %s", t.c.Name, m.Name, AnnotationMountPath)))
			}
		}
		for _, e := range t.c.Env {
			if req.sslCertFile != "" && e.Name == "SSL_CERT_FILE" && e.Value != sslValue {
				errs = append(errs, field.Invalid(annotationPath(AnnotationSSLCertFile), req.sslCertFileRaw,
					fmt.Sprintf("container %q already sets SSL_CERT_FILE to %q; remove it or drop the annotation", t.c.Name, e.Value)))
			}
		}
	}
	return targets, errs
}

func indexOf(all []target, name string) int {
	for i, t := range all {
		if t.c.Name == name {
			return i
		}
	}
	return -1
}

func containerNames(all []target) []string {
	var out []string
	for _, t := range all {
		out = append(out, t.c.Name)
	}
	return out
}

// build assembles the patch. Edits to existing containers come before the sidecar is
// inserted at the front of initContainers, so their indices are still right.
func build(pod *corev1.Pod, req *request, targets []target, cfg Config) ([]PatchOp, []string) {
	switch req.delivery {
	case v1alpha1.DeliveryNative:
		return buildNative(pod, req, targets)
	case v1alpha1.DeliveryNode:
		return buildNode(pod, req, targets, cfg)
	}
	var warnings []string
	names := newNamer(pod)
	volume := names.volume("trustsync-anchors")
	sidecar := names.container("trustsync")
	status := v1alpha1.InjectionStatus{Mode: req.mode, Sidecar: sidecar, Volume: volume, MountPath: req.mountPath}

	p := &patch{}
	addStatus(p, pod, status)

	s := sidecarSpec{req: req, cfg: cfg, volume: volume, uid: appUID(pod, targets), gid: appGID(pod, targets)}
	if req.certificate != nil && s.uid == defaultUID && !runsAs(pod, targets, defaultUID) {
		warnings = append(warnings, fmt.Sprintf("trustsync: neither the pod nor container %q sets runAsUser, so the sidecar writes %s (mode 0600) as uid %d, which an app running as another uid (its image's USER, say) cannot read; set securityContext.runAsUser (and runAsGroup) to the app's ids",
			targets[0].c.Name, v1alpha1.FileKey, defaultUID))
	}
	volumes := []corev1.Volume{{Name: volume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		Medium: corev1.StorageMediumMemory, SizeLimit: &req.volumeSizeLimit,
	}}}}
	if req.certificate != nil {
		s.stateVolume = names.volume("trustsync-state")
		volumes = append(volumes, stateVolume(s.stateVolume))
	}
	if pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken {
		s.tokenVolume = names.volume("trustsync-token")
		volumes = append(volumes, tokenVolume(s.tokenVolume))
	}
	marker := ""
	if r := req.reload; r != nil && r.Signal != "" {
		marker = names.volume("trustsync-reload-target")
		volumes = append(volumes, corev1.Volume{Name: marker, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("4Ki")),
		}}})
		if pod.Spec.ShareProcessNamespace == nil {
			p.add("/spec/shareProcessNamespace", true)
		}
	}
	appendItems(p, "/spec/volumes", pod.Spec.Volumes != nil, volumes...)
	addPullSecrets(p, pod, cfg.ImagePullSecrets)

	for _, t := range targets {
		mountInto(p, t, req, volume)
	}
	if marker != "" {
		// The signal's container alone gets the marker: how the sidecar finds it.
		t, _ := appContainer(pod, req.reload.Container) // resolveReload found it
		listed := t.c.VolumeMounts != nil || slices.ContainsFunc(targets, func(x target) bool { return !x.init && x.index == t.index })
		appendItems(p, t.path()+"/volumeMounts", listed, corev1.VolumeMount{Name: marker, MountPath: contract.ReloadMarkerPath, ReadOnly: true})
	}

	first := func(c corev1.Container) {
		if pod.Spec.InitContainers == nil {
			p.add("/spec/initContainers", []corev1.Container{c})
		} else {
			p.add("/spec/initContainers/0", c)
		}
	}
	switch {
	case req.mode == v1alpha1.ModeRestartableInit:
		first(s.container(sidecar, "run", true))
	case pod.Spec.RestartPolicy == corev1.RestartPolicyNever || pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure:
		// A regular sidecar container never exits, so a pod that should run to
		// completion (a Job's) never would: the files are written once, at start.
		first(s.container(sidecar, "init", false))
		warnings = append(warnings, fmt.Sprintf("trustsync: sidecar mode legacy with restartPolicy %s: the trust files are written once at start and not kept current, since a running sidecar would keep the pod from completing; use sidecar mode native (Kubernetes 1.29 or later) to keep them current", pod.Spec.RestartPolicy))
	default:
		first(s.container(names.container("trustsync-init"), "init", false))
		p.add("/spec/containers/-", s.container(sidecar, "run", false))
	}
	return p.ops, warnings
}

// addPullSecrets lists the sidecar image's pull Secrets the pod does not list yet.
func addPullSecrets(p *patch, pod *corev1.Pod, names []string) {
	var missing []corev1.LocalObjectReference
	for _, n := range names {
		ref := corev1.LocalObjectReference{Name: n}
		if !slices.Contains(pod.Spec.ImagePullSecrets, ref) && !slices.Contains(missing, ref) {
			missing = append(missing, ref)
		}
	}
	appendItems(p, "/spec/imagePullSecrets", pod.Spec.ImagePullSecrets != nil, missing...)
}

// buildNative gives the pod the projected volume and the same mounts and environment
// as the sidecar would, and no sidecar.
func buildNative(pod *corev1.Pod, req *request, targets []target) ([]PatchOp, []string) {
	var warnings []string
	volume := newNamer(pod).volume("trustsync-anchors")
	p := &patch{}
	addStatus(p, pod, v1alpha1.InjectionStatus{Delivery: v1alpha1.DeliveryNative, Volume: volume, MountPath: req.mountPath})
	var uid *int64
	if req.certificate != nil {
		if runsAs(pod, targets, appUID(pod, targets)) {
			uid = ptr.To(appUID(pod, targets))
		} else {
			warnings = append(warnings, fmt.Sprintf("trustsync: neither the pod nor container %q sets runAsUser, so the kubelet writes %s owned by root, which an app running as another uid cannot read; set securityContext.runAsUser to the app's uid", targets[0].c.Name, v1alpha1.FileKey))
		}
	}
	appendItems(p, "/spec/volumes", pod.Spec.Volumes != nil, nativeVolume(volume, req, uid))
	for _, t := range targets {
		mountInto(p, t, req, volume)
	}
	return p.ops, warnings
}

// resolveReload picks the container that gets the reload signal and refuses what
// would keep it from arriving: a container the sidecar may not signal (only a
// process's own user may, and the sidecar has no capabilities), a pod that keeps its
// process namespace private or shares the host's.
func resolveReload(pod *corev1.Pod, req *request, targets []target) field.ErrorList {
	r := req.reload
	if r.Signal == "" {
		return nil
	}
	var errs field.ErrorList
	if r.Container == "" {
		// The first app container that gets the files, else the first app container.
		r.Container = pod.Spec.Containers[0].Name
		for _, t := range targets {
			if !t.init {
				r.Container = t.c.Name
				break
			}
		}
	}
	// Blame the annotation that chose the container.
	key, value := AnnotationReloadSignal, r.Signal
	if _, ok := pod.Annotations[AnnotationReloadContainer]; ok {
		key, value = AnnotationReloadContainer, r.Container
	}
	t, ok := appContainer(pod, r.Container)
	if !ok {
		names := make([]string, len(pod.Spec.Containers))
		for j, c := range pod.Spec.Containers {
			names[j] = c.Name
		}
		return field.ErrorList{field.Invalid(annotationPath(AnnotationReloadContainer), r.Container, "names no app container of this pod; it has: "+strings.Join(names, ", "))}
	}
	c := t.c
	uid := appUID(pod, targets)
	runAs := containerID(pod, c, userID)
	switch {
	case runAs == nil || *runAs == 0:
		errs = append(errs, field.Invalid(annotationPath(key), value, fmt.Sprintf(
			"container %q sets no non-root runAsUser (nor does the pod), so the sidecar, which runs as a non-root user without capabilities, could not signal it; set securityContext.runAsUser", c.Name)))
	case *runAs != uid:
		errs = append(errs, field.Invalid(annotationPath(key), value, fmt.Sprintf(
			"container %q runs as uid %d and the sidecar as uid %d (the first container given the files), and a process may signal only its own user's; run them as one user", c.Name, *runAs, uid)))
	}
	if pod.Spec.ShareProcessNamespace != nil && !*pod.Spec.ShareProcessNamespace {
		errs = append(errs, field.Invalid(annotationPath(AnnotationReloadSignal), r.Signal, "needs the pod's containers to share a process namespace, and the pod sets spec.shareProcessNamespace: false; remove it (the injector sets it), or use "+AnnotationReloadURL))
	}
	if pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken {
		// The sidecar's token is withheld from the app, but a shared process namespace
		// with the same user opens /proc/<sidecar>/root to the app.
		errs = append(errs, field.Invalid(annotationPath(AnnotationReloadSignal), r.Signal, fmt.Sprintf(
			"the pod sets automountServiceAccountToken: false, so the sidecar alone holds a token, and a signal needs the app to share the sidecar's process namespace and user, which would let the app read that token through /proc; use %s, or let the pod mount its token", AnnotationReloadURL)))
	}
	if pod.Spec.HostPID {
		errs = append(errs, field.Invalid(annotationPath(AnnotationReloadSignal), r.Signal, "the pod shares the host's process namespace (hostPID), where a signal could reach the host's processes; use "+AnnotationReloadURL))
	}
	return errs
}

// appContainer finds an app container by name.
func appContainer(pod *corev1.Pod, name string) (target, bool) {
	i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		return target{}, false
	}
	return target{index: i, c: &pod.Spec.Containers[i]}, true
}

// idField is one id of a security context, the pod's or a container's: its user or
// its group.
type idField struct {
	container func(*corev1.SecurityContext) *int64
	pod       func(*corev1.PodSecurityContext) *int64
}

var (
	userID = idField{
		container: func(sc *corev1.SecurityContext) *int64 { return sc.RunAsUser },
		pod:       func(psc *corev1.PodSecurityContext) *int64 { return psc.RunAsUser },
	}
	groupID = idField{
		container: func(sc *corev1.SecurityContext) *int64 { return sc.RunAsGroup },
		pod:       func(psc *corev1.PodSecurityContext) *int64 { return psc.RunAsGroup },
	}
)

// containerID is the id container c runs with: its own, else the pod's; nil when
// neither sets one (the image's then applies). The one rule for who a container runs
// as, used for the sidecar's user, the key's owner and who may be signalled.
func containerID(pod *corev1.Pod, c *corev1.Container, f idField) *int64 {
	if c != nil && c.SecurityContext != nil {
		if id := f.container(c.SecurityContext); id != nil {
			return id
		}
	}
	if pod.Spec.SecurityContext != nil {
		return f.pod(pod.Spec.SecurityContext)
	}
	return nil
}

// targetID is the id of the first container given the files, else the pod's.
func targetID(pod *corev1.Pod, targets []target, f idField) *int64 {
	var c *corev1.Container
	if len(targets) > 0 {
		c = targets[0].c
	}
	return containerID(pod, c, f)
}

// runsAs reports whether the pod or its first target container sets runAsUser to uid.
func runsAs(pod *corev1.Pod, targets []target, uid int64) bool {
	id := targetID(pod, targets, userID)
	return id != nil && *id == uid
}

func hasEnv(c *corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// namer hands out names that clash with none of the pod's own, so an injected pod is
// never broken by a name the user already took.
type namer struct {
	volumes, containers sets.Set[string]
}

func newNamer(pod *corev1.Pod) *namer {
	n := &namer{volumes: sets.New[string](), containers: sets.New[string]()}
	for _, v := range pod.Spec.Volumes {
		n.volumes.Insert(v.Name)
	}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		n.containers.Insert(c.Name)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		n.containers.Insert(c.Name)
	}
	return n
}

func unique(taken sets.Set[string], base string) string {
	name := base
	for i := 2; taken.Has(name); i++ {
		name = base + "-" + strconv.Itoa(i)
	}
	taken.Insert(name)
	return name
}

func (n *namer) volume(base string) string    { return unique(n.volumes, base) }
func (n *namer) container(base string) string { return unique(n.containers, base) }

// addStatus records what was injected, for reinvocation.
func addStatus(p *patch, pod *corev1.Pod, status v1alpha1.InjectionStatus) {
	statusJSON, _ := json.Marshal(status)
	if pod.Annotations == nil {
		p.add("/metadata/annotations", map[string]string{v1alpha1.AnnotationStatus: string(statusJSON)})
	} else {
		p.add("/metadata/annotations/"+escapeKey(v1alpha1.AnnotationStatus), string(statusJSON))
	}
}
