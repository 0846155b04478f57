package trustfiles

import (
	"encoding/json"
	"path"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/contract"
)

// TrustFile is one trust file a pod's containers read, as the stored pod says it is
// delivered: by trustsync's sidecar or node agent (what the injector injected), or by
// the kubelet projecting ClusterTrustBundles (injected with delivery native, or
// written into the pod by hand). It is what observation reads and what a report
// compares with the sources.
type TrustFile struct {
	Delivery v1alpha1.Delivery
	// Volume is the pod's volume holding the file; File its path in the volume.
	Volume string
	File   string
	// Format is v1alpha1.FormatPEM, or a Java truststore's.
	Format string
	// MountPaths are where the pod's containers see the file, each once.
	MountPaths []string
	// Sources are what the file is made of.
	Sources []v1alpha1.Source
	// SubPath, when set, is one container reading the file through a subPath
	// mount (MountPaths is then that mount alone): the kubelet bind-mounts the file
	// as it is when the container starts and never refreshes it, so the container
	// sees that, not the volume's current file.
	SubPath *SubPathMount
}

// SubPathMount is a container's subPath mount of a trust file: its name, and the
// mount's index among the container's volumeMounts (which names the kubelet's bind
// of it).
type SubPathMount struct {
	Container string
	Index     int
}

// Path is where the app sees the file: its first mount path, or the file in the
// volume when no container mounts it.
func (f TrustFile) Path() string {
	if len(f.MountPaths) > 0 {
		return f.MountPaths[0]
	}
	return f.File
}

// Delivered lists the trust files of a stored pod that trustsync delivers (its
// sidecar's, as the injector recorded them in its trustsync.io/status annotation and
// the sidecar's arguments say; its node agent's, every volume of its CSI driver) or
// the kubelet projects from bundles. It never lists a certificate or
// key: only the paths of trust sources. A pod whose injected spec cannot be read back
// (edited by hand) lists what can be.
func Delivered(pod *corev1.Pod) []TrustFile {
	var files []TrustFile
	var st v1alpha1.InjectionStatus
	injected := json.Unmarshal([]byte(pod.Annotations[v1alpha1.AnnotationStatus]), &st) == nil && st.Volume != ""
	for _, v := range pod.Spec.Volumes {
		var sources []v1alpha1.Source
		delivery := v1alpha1.DeliveryNative
		switch {
		case v.Projected != nil:
			sources = projectedTrust(v.Projected)
		case v.CSI != nil && v.CSI.Driver == contract.CSIDriverName:
			// Every volume of trustsync's driver is a node delivery, injected or
			// written by hand: the agent published it from these attributes (and
			// checked them against the namespace's grants), whatever the pod's
			// annotations say. A volume of any other driver is none.
			delivery = v1alpha1.DeliveryNode
			if spec, err := contract.SpecFromAttributes(v.CSI.VolumeAttributes, "/", "/"); err == nil {
				sources = spec.Sources
			}
		case injected && v.Name == st.Volume && (st.Delivery == "" || st.Delivery == v1alpha1.DeliverySidecar) && v.EmptyDir != nil:
			delivery = v1alpha1.DeliverySidecar
			if c := sidecarContainer(pod, st.Sidecar); c != nil {
				if spec, err := contract.SpecFromArgs(c.Args); err == nil {
					sources = spec.Sources
				}
			}
		}
		files = append(files, sourceFiles(pod, v.Name, st.Sidecar, delivery, sources)...)
	}
	return files
}

// projectedTrust is a projected volume's ClusterTrustBundle sources, as sources.
func projectedTrust(p *corev1.ProjectedVolumeSource) []v1alpha1.Source {
	var sources []v1alpha1.Source
	for _, s := range p.Sources {
		ctb := s.ClusterTrustBundle
		if ctb == nil {
			continue
		}
		src := v1alpha1.Source{Path: ctb.Path, LabelSelector: ctb.LabelSelector, Optional: ctb.Optional != nil && *ctb.Optional}
		if ctb.Name != nil {
			src.Name = *ctb.Name
		}
		if ctb.SignerName != nil {
			src.SignerName = *ctb.SignerName
		}
		sources = append(sources, src)
	}
	return sources
}

// sourceFiles groups sources by the file they write, in the order of first mention,
// then adds each subPath reader of each file as a file of its own.
func sourceFiles(pod *corev1.Pod, volume, sidecar string, delivery v1alpha1.Delivery, sources []v1alpha1.Source) []TrustFile {
	var files []TrustFile
	index := map[string]int{}
	for _, s := range sources {
		i, ok := index[s.Path]
		if !ok {
			i = len(files)
			index[s.Path] = i
			files = append(files, TrustFile{Delivery: delivery, Volume: volume, File: s.Path, Format: s.FileFormat()})
		}
		files[i].Sources = append(files[i].Sources, s)
	}
	return withMounts(pod, files, sidecar)
}

// withMounts says where the pod's containers but the sidecar read each of files:
// MountPaths, their mounts of the volume's directory; and, after files, one file for
// each container mounting one of them through subPath (the kubelet binds the file as
// it is when the container starts and never refreshes it). A file that only subPath
// mounts read is replaced by them: no container sees the volume's own file, so it is
// nobody's holding.
func withMounts(pod *corev1.Pod, files []TrustFile, sidecar string) []TrustFile {
	var out, subs []TrustFile
	for _, f := range files {
		f.MountPaths = nil
		var readers []TrustFile
		for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
			if c.Name == sidecar && sidecar != "" {
				continue
			}
			for i, m := range c.VolumeMounts {
				switch {
				case m.Name != f.Volume:
				case m.SubPath == "":
					if p := path.Join(m.MountPath, f.File); !slices.Contains(f.MountPaths, p) {
						f.MountPaths = append(f.MountPaths, p)
					}
				case m.SubPath == f.File:
					sub := f
					sub.MountPaths, sub.SubPath = []string{m.MountPath}, &SubPathMount{Container: c.Name, Index: i}
					readers = append(readers, sub)
				}
			}
		}
		if len(f.MountPaths) > 0 || len(readers) == 0 {
			out = append(out, f)
		}
		subs = append(subs, readers...)
	}
	return append(out, subs...)
}

func sidecarContainer(pod *corev1.Pod, name string) *corev1.Container {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	return nil
}
