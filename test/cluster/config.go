package cluster

import (
	"fmt"
	"path/filepath"
)

// shimSocketDir holds the runc shims' sockets. containerd limits the directory to 42
// characters (a socket path is at most 107), so it cannot live under a run directory
// of arbitrary length; Down removes it.
const shimSocketDir = "/run/trustsync-shims"

// containerdConfig keeps every piece of containerd's state under dir (root, state,
// sockets, network namespaces, runc's state) and works around the machine's quirks:
// runc cannot lower oom_score_adj here (no CAP_SYS_RESOURCE). Images are imported; a
// test that pulls from a registry of its own says how to reach it in
// RegistryHostsDir (containerd's hosts.toml, read at each pull).
func containerdConfig(dir, bin string) string {
	d := func(p string) string { return filepath.Join(dir, "containerd", p) }
	return fmt.Sprintf(`version = 3
root = %q
state = %q
temp = %q

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %q
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = %q

  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%q]
      conf_dir = %q
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %q
          Root = %q
          SystemdCgroup = false

  [plugins.'io.containerd.internal.v1.opt']
    path = %q

  [plugins.'io.containerd.nri.v1.nri']
    disable = true

  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = %q
`,
		d("root"), d("state"), d("tmp"),
		d("containerd.sock"), d("containerd.sock.ttrpc"),
		PauseImage, RegistryHostsDir(dir),
		filepath.Join(bin, "cni"), filepath.Join(dir, "cni", "net.d"),
		filepath.Join(bin, "runc"), d("runc"),
		d("opt"),
		shimSocketDir)
}

// RegistryHostsDir is where the node's containerd looks for how to reach a registry:
// <dir>/<host:port>/hosts.toml (a CA to trust, say).
func RegistryHostsDir(dir string) string { return filepath.Join(dir, "containerd", "certs.d") }

// cniConfig puts pods on the pre-made bridge. The bridge already has the node's
// address, so the plugin is no gateway (it would turn on IP forwarding); pods route
// through the node's address instead. No masquerading: pods talk only to the node.
func cniConfig(dir string) string {
	return `{
  "cniVersion": "1.0.0",
  "name": "trustsync",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "` + Bridge + `",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "` + PodSubnet + `", "gateway": "` + NodeIP + `"}]],
        "routes": [{"dst": "0.0.0.0/0", "gw": "` + NodeIP + `"}],
        "dataDir": "` + filepath.Join(dir, "cni", "networks") + `"
      }
    },
    {"type": "loopback"}
  ]
}
`
}

// kubeletConfig is the node's KubeletConfiguration. cgroup v1 with cgroupfs is what
// these machines offer; imported images must never be garbage-collected (there is no
// registry to pull them back from); eviction thresholds are low so a busy test disk
// does not evict the suite's pods.
func kubeletConfig(dir string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
resolvConf: /etc/resolv.conf
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
`, NodeIP, filepath.Join(dir, "pki", "client-ca.crt"), filepath.Join(dir, "containerd", "containerd.sock"), filepath.Join(dir, "pod-logs"))
}
