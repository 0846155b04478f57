package agent

import (
	"context"
	"fmt"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/agent/store"
)

// Adopt takes over every volume a previous agent published on this node, as it finds
// them: one still mounted for a pod that still exists is kept current from the files
// it holds (the app never sees them change but by a complete swap); one whose pod is
// gone, or that is no longer mounted, is removed. It runs before the agent serves the
// kubelet, so no request races it.
func (m *Manager) Adopt(ctx context.Context) error {
	records, broken, err := m.store.List()
	if err != nil {
		return fmt.Errorf("cannot read the volumes kept in %s: %w", m.store.Root, err)
	}
	for _, dir := range broken {
		klog.InfoS("Removing a volume directory whose record cannot be read", "dir", dir)
		m.removeDir(dir)
	}
	adopted, removed := 0, 0
	for _, rec := range records {
		if reason := m.gone(ctx, rec); reason != "" {
			klog.InfoS("Removing a volume left by a previous agent", "pod", klog.KRef(rec.Pod.Namespace, rec.Pod.Name), "volumeID", rec.VolumeID, "reason", reason)
			m.teardown(rec)
			removed++
			continue
		}
		v, err := m.volumeOf(rec)
		if err != nil {
			// What was published once should assemble again; if it cannot, its files
			// stay as they are (still the pod's last good content) and the kubelet's
			// next republish or unpublish settles it.
			klog.ErrorS(err, "Cannot adopt a volume; its files stay as they are", "pod", klog.KRef(rec.Pod.Namespace, rec.Pod.Name), "volumeID", rec.VolumeID)
			continue
		}
		m.start(v)
		adopted++
	}
	klog.InfoS("Adopted the volumes of a previous agent", "adopted", adopted, "removed", removed)
	return nil
}

// gone says why rec's volume should not be kept: its pod is gone (or another pod has
// its name), or its target is no longer mounted; "" to keep it.
func (m *Manager) gone(ctx context.Context, rec store.Record) string {
	mounted, err := m.cfg.Mounter.IsMountPoint(rec.TargetPath)
	if err != nil || !mounted {
		return "its target is not mounted"
	}
	pod, err := m.cfg.Pods.Get(ctx, rec.Pod.Namespace, rec.Pod.Name)
	switch {
	case apierrors.IsNotFound(err):
		return "its pod is gone"
	case err != nil:
		return "" // not known to be gone: keep it, and ask again later
	case string(pod.UID) != rec.Pod.UID:
		return "its pod is gone (another pod has its name)"
	case pod.Spec.NodeName != m.cfg.NodeName:
		return "its pod is not on this node"
	}
	return ""
}

// Reap removes, every interval until ctx is done, the volumes whose pods are gone:
// the kubelet unpublishes a volume when its pod goes, but not one it no longer knows
// of (a pod deleted while the node was restarting, say).
func (m *Manager) Reap(ctx context.Context, interval time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		m.mu.Lock()
		var recs []store.Record
		for _, v := range m.volumes {
			recs = append(recs, v.rec)
		}
		m.mu.Unlock()
		for _, rec := range recs {
			if reason := m.gone(ctx, rec); reason != "" {
				klog.InfoS("Removing a volume the kubelet did not unpublish", "pod", klog.KRef(rec.Pod.Namespace, rec.Pod.Name), "volumeID", rec.VolumeID, "reason", reason)
				if err := m.Unpublish(ctx, rec.VolumeID, rec.TargetPath); err != nil {
					klog.ErrorS(err, "Cannot remove a volume", "volumeID", rec.VolumeID)
				}
			}
		}
	}, interval)
}

// teardown unmounts and removes a volume that is not running.
func (m *Manager) teardown(rec store.Record) {
	if err := m.cfg.Mounter.Unmount(rec.TargetPath); err != nil {
		klog.ErrorS(err, "Cannot unmount a volume", "target", rec.TargetPath)
	}
	m.forget(rec)
}

func (m *Manager) removeDir(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		klog.ErrorS(err, "Cannot remove a directory", "dir", dir)
	}
}
