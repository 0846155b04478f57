package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/keymutex"
	"k8s.io/utils/ptr"

	"github.com/trustsync/trustsync/agent/csi"
	"github.com/trustsync/trustsync/agent/mounts"
	"github.com/trustsync/trustsync/agent/store"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/delivery/podevents"
	"github.com/trustsync/trustsync/delivery/watch"
	"github.com/trustsync/trustsync/tenancy"
)

// DriverName is the agent's CSI driver name.
const DriverName = contract.CSIDriverName

// The attributes the kubelet adds to a publish request: the pod's identity
// (podInfoOnMount) and its ServiceAccount tokens (tokenRequests).
const (
	AttributePodName        = contract.KubeletAttributePrefix + "pod.name"
	AttributePodNamespace   = contract.KubeletAttributePrefix + "pod.namespace"
	AttributePodUID         = contract.KubeletAttributePrefix + "pod.uid"
	AttributeServiceAccount = contract.KubeletAttributePrefix + "serviceAccount.name"
	AttributeTokens         = csi.TokensKey
)

// Pods is what the agent asks about the pods on its node.
type Pods interface {
	// Get returns the pod, from the node's cache or else the API server.
	Get(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// IP is the pod's address now, if it is still the pod with uid.
	IP(namespace, name, uid string) (string, error)
}

// Config is what a Manager works with.
type Config struct {
	NodeName string
	Store    store.Store
	Mounter  mounts.Mounter
	// REST is where the API server is; per-pod clients take its address and CA, and
	// the pod's token for credentials.
	REST     *rest.Config
	Registry *watch.Registry
	Pods     Pods
	Events   *podevents.Broadcaster
	// TokenAudience is the audience of the pod token the CSIDriver asks the kubelet
	// for ("" for the API server's own).
	TokenAudience string
	// FirstSyncTimeout bounds how long a publish waits for the sources and the
	// certificate, so the pod's Event says why well before the kubelet's own timeout.
	FirstSyncTimeout time.Duration
	// Grants, when set, enforces tenancy: a volume asking for what its namespace is
	// not granted is not mounted, and a running volume leaves out a bundle no longer
	// granted. Bundles says what a bundle asked for by name is labelled.
	Grants  tenancy.Lookup
	Bundles tenancy.BundleLookup
}

// Manager publishes, keeps current and removes the volumes of the pods on its node.
type Manager struct {
	cfg     Config
	store   store.Store
	metrics *Metrics
	// ctx bounds every volume's pipeline: the agent's lifetime, not a request's.
	ctx context.Context
	// locks serialises the requests for one volume.
	locks keymutex.KeyMutex

	mu      sync.Mutex
	volumes map[string]*volume
}

// NewManager returns a manager whose pipelines run until ctx is done.
func NewManager(ctx context.Context, cfg Config, m *Metrics) *Manager {
	if cfg.FirstSyncTimeout == 0 {
		cfg.FirstSyncTimeout = 30 * time.Second
	}
	if m == nil {
		m = NewMetrics()
	}
	return &Manager{cfg: cfg, store: cfg.Store, metrics: m, ctx: ctx, locks: keymutex.NewHashed(0), volumes: map[string]*volume{}}
}

// Publish writes the volume's files and mounts them at the target, returning only
// once every required file is written: the pod's first read is complete. A volume
// already published (the kubelet republishes periodically, requiresRepublish) only
// takes the pod's renewed token.
func (m *Manager) Publish(ctx context.Context, req csi.PublishRequest) (err error) {
	m.locks.LockKey(req.VolumeID)
	defer func() { _ = m.locks.UnlockKey(req.VolumeID) }()
	start := time.Now()
	defer func() { m.metrics.published(err, time.Since(start)) }()

	pod := store.Pod{Namespace: req.Attributes[AttributePodNamespace], Name: req.Attributes[AttributePodName],
		UID: req.Attributes[AttributePodUID], ServiceAccount: req.Attributes[AttributeServiceAccount]}
	if pod.Namespace == "" || pod.Name == "" || pod.UID == "" {
		return csi.InvalidArgument("the request does not name its pod (%s, %s, %s): the CSIDriver %s must have podInfoOnMount: true", AttributePodNamespace, AttributePodName, AttributePodUID, DriverName)
	}
	if v := m.running(req.VolumeID); v != nil {
		if v.rec.TargetPath != req.TargetPath || v.rec.Pod.UID != pod.UID {
			return csi.AlreadyExists("volume %s is already published at %s for pod %s (uid %s)", req.VolumeID, v.rec.TargetPath, v.rec.Pod, v.rec.Pod.UID)
		}
		return m.refreshToken(req, v.needsToken)
	}
	// The attributes are parsed once, here; the volume is assembled from what this
	// gives.
	spec, plan, err := m.spec(req.VolumeID, req.Attributes, pod.Namespace)
	if err != nil {
		return csi.InvalidArgument("%v", err)
	}
	if err := m.granted(ctx, pod.Namespace, spec.Asks(fmt.Sprintf("volume %s (%s)", volumeName(req.TargetPath), DriverName))); err != nil {
		return csi.PermissionDenied("pod %s: %v", pod, err)
	}
	p, err := m.cfg.Pods.Get(ctx, pod.Namespace, pod.Name)
	switch {
	case err != nil:
		return csi.FailedPrecondition("cannot find pod %s: %v", pod, err)
	case string(p.UID) != pod.UID:
		return csi.FailedPrecondition("pod %s has uid %s, not %s as the request says", pod, p.UID, pod.UID)
	case p.Spec.NodeName != m.cfg.NodeName:
		return csi.PermissionDenied("pod %s is on node %q, not this node (%q): the agent publishes volumes of its own node's pods only", pod, p.Spec.NodeName, m.cfg.NodeName)
	case p.Spec.ServiceAccountName != pod.ServiceAccount && pod.ServiceAccount != "":
		return csi.FailedPrecondition("pod %s runs as ServiceAccount %q, not %q as the request says", pod, p.Spec.ServiceAccountName, pod.ServiceAccount)
	}
	pod.ServiceAccount = p.Spec.ServiceAccountName
	rec := store.Record{VolumeID: req.VolumeID, TargetPath: req.TargetPath, Pod: pod, Attributes: req.Attributes, Owner: appOwner(p, volumeName(req.TargetPath))}
	token, err := m.podToken(req)
	if err != nil && readsWithPodToken(plan, spec) {
		return csi.InvalidArgument("%v", err)
	}
	if err := m.store.Create(rec); err != nil {
		return csi.Internal("cannot keep volume %s: %v", req.VolumeID, err)
	}
	// From here, a publish that fails leaves nothing: no record, no token, no
	// pipeline. One deferred clean-up, so that no new way to fail can forget it.
	var v *volume
	published := false
	defer func() {
		if published {
			return
		}
		if v != nil {
			v.stop()
		}
		m.forget(rec)
	}()
	if token != "" {
		if err := m.store.SetToken(req.VolumeID, token); err != nil {
			return csi.Internal("cannot keep the pod's token: %v", err)
		}
	}
	if v, err = m.newVolume(rec, spec, plan); err != nil {
		return csi.InvalidArgument("%v", err)
	}
	firstCtx, cancel := context.WithTimeout(ctx, m.cfg.FirstSyncTimeout)
	err = v.first(firstCtx, m.cfg.FirstSyncTimeout.String()+" (the agent's --first-sync-timeout)")
	cancel()
	if err != nil {
		return csi.Unavailable("pod %s: %v", pod, err)
	}
	if err := m.mount(rec); err != nil {
		return csi.Internal("cannot mount the files at %s: %v", req.TargetPath, err)
	}
	published = true
	m.start(v)
	klog.InfoS("Published volume", "pod", klog.KRef(pod.Namespace, pod.Name), "volumeID", req.VolumeID, "paths", len(v.plan.Paths()), "took", time.Since(start))
	return nil
}

// granted returns nil when the namespace is granted every ask (or tenancy is not
// enforced), or why not. The webhook checked the same at admission; its failure
// policy may have let the pod through, and this is where the files are written.
func (m *Manager) granted(ctx context.Context, namespace string, asks []tenancy.Ask) error {
	if m.cfg.Grants == nil || len(asks) == 0 {
		return nil
	}
	g, exempt, err := m.cfg.Grants(ctx, namespace)
	switch {
	case err != nil:
		return fmt.Errorf("cannot tell what namespace %s is granted: %w", namespace, err)
	case exempt:
		return nil
	}
	return g.Check(asks, m.cfg.Bundles)
}

// admit says, at each sync of a running volume of namespace, whether a bundle is
// granted now: nil without enforcement.
func (m *Manager) admit(namespace string) func(*certificatesv1.ClusterTrustBundle) error {
	if m.cfg.Grants == nil {
		return nil
	}
	return func(b *certificatesv1.ClusterTrustBundle) error {
		g, exempt, err := m.cfg.Grants(m.ctx, namespace)
		switch {
		case err != nil:
			return fmt.Errorf("%w: cannot tell what namespace %s is granted: %w", watch.ErrUndecided, namespace, err)
		case exempt:
			return nil
		}
		_, err = g.Bundle(tenancy.Bundle{Name: b.Name, SignerName: b.Spec.SignerName, Labels: b.Labels})
		return err
	}
}

// GrantsChanged has every running volume look at its bundles again: a TrustPolicy or
// a namespace changed, so a bundle a volume holds may be granted no more (or again).
func (m *Manager) GrantsChanged() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.volumes {
		select {
		case v.recheck <- struct{}{}:
		default: // a recheck is pending already
		}
	}
}

// refreshToken keeps a republished volume's renewed token.
func (m *Manager) refreshToken(req csi.PublishRequest, needed bool) error {
	token, err := m.podToken(req)
	if err != nil {
		if needed {
			return csi.InvalidArgument("%v", err)
		}
		return nil
	}
	if err := m.store.SetToken(req.VolumeID, token); err != nil {
		return csi.Internal("cannot keep the pod's renewed token: %v", err)
	}
	return nil
}

// Unpublish stops the volume's pipeline, unmounts it and removes what the agent kept
// of it. A volume the agent does not know is unmounted all the same: the request may
// follow a restart that lost it.
func (m *Manager) Unpublish(_ context.Context, volumeID, targetPath string) error {
	m.locks.LockKey(volumeID)
	defer func() { _ = m.locks.UnlockKey(volumeID) }()
	m.mu.Lock()
	v := m.volumes[volumeID]
	delete(m.volumes, volumeID)
	m.mu.Unlock()
	if v != nil {
		v.stop()
		m.metrics.volumes.Dec()
	}
	if err := m.cfg.Mounter.Unmount(targetPath); err != nil {
		return csi.Internal("cannot unmount %s: %v", targetPath, err)
	}
	if err := m.store.Remove(volumeID); err != nil {
		return csi.Internal("cannot remove volume %s's files: %v", volumeID, err)
	}
	if v != nil {
		klog.InfoS("Unpublished volume", "pod", klog.KRef(v.rec.Pod.Namespace, v.rec.Pod.Name), "volumeID", volumeID)
	}
	return nil
}

func (m *Manager) running(volumeID string) *volume {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.volumes[volumeID]
}

// start runs v's pipeline from now on.
func (m *Manager) start(v *volume) {
	ctx, cancel := context.WithCancel(m.ctx)
	v.cancel = cancel
	m.mu.Lock()
	m.volumes[v.rec.VolumeID] = v
	m.mu.Unlock()
	m.metrics.volumes.Inc()
	go v.run(ctx)
}

// forget removes what was kept of a volume that was never published.
func (m *Manager) forget(rec store.Record) {
	if err := m.store.Remove(rec.VolumeID); err != nil {
		klog.ErrorS(err, "Cannot remove a volume's directory", "volumeID", rec.VolumeID)
	}
}

// mount makes the volume's files visible at its target, read-only.
func (m *Manager) mount(rec store.Record) error {
	if err := os.MkdirAll(rec.TargetPath, 0o750); err != nil {
		return err
	}
	mounted, err := m.cfg.Mounter.IsMountPoint(rec.TargetPath)
	if err != nil || mounted {
		return err
	}
	return m.cfg.Mounter.BindReadOnly(m.store.Files(rec.VolumeID), rec.TargetPath)
}

// podToken is the pod's token for the configured audience, from the request.
func (m *Manager) podToken(req csi.PublishRequest) (string, error) {
	raw, ok := req.Tokens, req.HasTokens
	if !ok {
		return "", fmt.Errorf("the request carries no ServiceAccount token (%s): the CSIDriver %s must have tokenRequests with audience %q, which the chart sets", AttributeTokens, DriverName, m.cfg.TokenAudience)
	}
	var tokens map[string]struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal([]byte(raw), &tokens); err != nil {
		return "", fmt.Errorf("%s is not the kubelet's JSON map of tokens: %v", AttributeTokens, err)
	}
	t, ok := tokens[m.cfg.TokenAudience]
	if !ok || t.Token == "" {
		return "", fmt.Errorf("the request carries no token for audience %q (the CSIDriver %s's tokenRequests must name it): ConfigMaps, Secrets and certificates are read and requested with the pod's own token", m.cfg.TokenAudience, DriverName)
	}
	return t.Token, nil
}

// volumeName is the pod's name for the volume, from the kubelet's target path
// (.../volumes/kubernetes.io~csi/NAME/mount).
func volumeName(target string) string {
	return filepath.Base(filepath.Dir(target))
}

// appOwner is who should own the files of volume: the uid and gid of the first
// container that mounts it, as the sidecar would run; nil when the pod does not say
// (the files are then the agent's, readable by all but the key).
func appOwner(pod *corev1.Pod, volume string) *store.Owner {
	containers := append(append([]corev1.Container{}, pod.Spec.Containers...), pod.Spec.InitContainers...)
	for _, c := range containers {
		for _, vm := range c.VolumeMounts {
			if vm.Name != volume {
				continue
			}
			uid, gid := podSecurity(pod)
			if sc := c.SecurityContext; sc != nil {
				if sc.RunAsUser != nil {
					uid = sc.RunAsUser
				}
				if sc.RunAsGroup != nil {
					gid = sc.RunAsGroup
				}
			}
			if uid == nil {
				return nil
			}
			return &store.Owner{UID: int(*uid), GID: int(ptr.Deref(gid, 0))}
		}
	}
	return nil
}

// podSecurity is the pod's uid and gid for its containers: its runAsGroup, else its
// fsGroup, which the app's group then shares.
func podSecurity(pod *corev1.Pod) (uid, gid *int64) {
	sc := pod.Spec.SecurityContext
	if sc == nil {
		return nil, nil
	}
	if sc.RunAsGroup != nil {
		return sc.RunAsUser, sc.RunAsGroup
	}
	return sc.RunAsUser, sc.FSGroup
}
