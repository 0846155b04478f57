package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
)

// Snapshot is what the node could leave behind on the host: processes of its
// binaries, mount points, network interfaces, kubelet cgroups and iptables rules.
type Snapshot map[string]sets.Set[string]

// nodeBinaries are the command names (cut to 15 bytes, as /proc/PID/comm holds them)
// of everything the node runs on the host.
var nodeBinaries = sets.New("etcd", "kube-apiserver", "kube-controller", "kube-scheduler", "kubelet",
	"containerd", "containerd-shim", "containerd-shim-runc-v2", "runc", "pause", "trustsync-sidec", "trustsync-webho", "trustsync-signe")

// TakeSnapshot reads the host's state.
func TakeSnapshot() Snapshot {
	s := Snapshot{"processes": sets.New[string](), "mounts": sets.New[string](), "interfaces": sets.New[string](),
		"cgroups": sets.New[string](), "iptables": sets.New[string]()}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(comm))
		if nodeBinaries.Has(name) && ofANode(e.Name()) && processAlive(atoi(e.Name())) {
			s["processes"].Insert(name + " (pid " + e.Name() + ")")
		}
	}
	for _, m := range mounts() {
		s["mounts"].Insert(m.point)
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		s["interfaces"].Insert(l.Name())
	}
	s["cgroups"].Insert(kubepodsCgroups()...)
	for _, table := range []string{"nat", "filter", "mangle"} {
		out, err := exec.Command("iptables-save", "-t", table).Output()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			// Chains and rules; counters and comments about the dump's time are noise.
			if strings.HasPrefix(line, "-A ") || strings.HasPrefix(line, ":") {
				if i := strings.Index(line, " ["); strings.HasPrefix(line, ":") && i > 0 {
					line = line[:i]
				}
				s["iptables"].Insert(table + " " + line)
			}
		}
	}
	return s
}

// nodeDirPrefix starts the name of every directory StartNode runs a cluster in.
const nodeDirPrefix = "trustsync-node-"

// ofANode reports whether a process is a node's: its command line names a node's
// directory or the shims' socket directory, or it runs in the kubelet's pod cgroups.
// The same binaries run elsewhere on a test machine at the same time (other e2e
// suites start etcd and trustsync processes of their own), and they are not the
// node's to clean up.
func ofANode(pid string) bool {
	cmdline, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
	if strings.Contains(string(cmdline), nodeDirPrefix) || strings.Contains(string(cmdline), shimSocketDir) {
		return true
	}
	cgroup, _ := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
	return strings.Contains(string(cgroup), "kubepods")
}

// Added lists, per kind, what now has and before had not.
func (now Snapshot) Added(before Snapshot) map[string][]string {
	added := map[string][]string{}
	for kind, set := range now {
		if d := set.Difference(before[kind]); d.Len() > 0 {
			l := d.UnsortedList()
			sort.Strings(l)
			added[kind] = l
		}
	}
	return added
}

func atoi(s string) int {
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			return -1
		}
		n = n*10 + int(r-'0')
	}
	return n
}
