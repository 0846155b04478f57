package cluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The node's network. One node per machine: the bridge, subnet and cgroup root are fixed.
const (
	Bridge = "tsync0"
	// NodeIP is the bridge's address: the node's, the kubelet's and the API server's.
	NodeIP    = "10.244.0.1"
	PodSubnet = "10.244.0.0/24"
	// ServiceCIDR holds KubernetesServiceIP, the `kubernetes` Service's ClusterIP that
	// in-cluster clients dial; one DNAT rule sends it to the API server.
	ServiceCIDR         = "10.96.0.0/16"
	KubernetesServiceIP = "10.96.0.1"
	APIServerPort       = 6443
	// ruleComment marks every iptables rule the cluster adds, so down finds them even
	// when up crashed half-way.
	ruleComment = "trustsync-cluster"
	// markerPath names the directory of the cluster up on this machine, so a second up
	// (or one after a crash) finds what the last one left.
	markerPath = "/run/trustsync-cluster"
)

// hostPaths are outside the run's directory but written by the kubelet or libcni
// whatever their configuration; down removes those that up did not find.
var hostPaths = []string{"/var/lib/kubelet", "/var/log/containers", "/var/lib/cni", "/run/mount"}

// sysctls the kubelet's container manager (kernel defaults) or the bridge plugin may
// change; down puts back what up found.
var sysctls = []string{
	"net/ipv4/ip_forward", "vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic",
	"kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// hostState is what up found on the host, saved so that down can restore it.
type hostState struct {
	Sysctls map[string]string `json:"sysctls"`
	Created []string          `json:"created"`
}

func recordHost() hostState {
	st := hostState{Sysctls: map[string]string{}}
	for _, s := range sysctls {
		if b, err := os.ReadFile("/proc/sys/" + s); err == nil {
			st.Sysctls[s] = strings.TrimSpace(string(b))
		}
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			st.Created = append(st.Created, p)
		}
	}
	return st
}

func (st hostState) save(path string) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

func loadHostState(path string) (hostState, error) {
	var st hostState
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

func (st hostState) restore() []error {
	var errs []error
	for s, v := range st.Sysctls {
		cur, err := os.ReadFile("/proc/sys/" + s)
		if err == nil && strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+s, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", s, v, err))
		}
	}
	for _, p := range st.Created {
		UnmountUnder(p)
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("remove %s (created by the node): %w", p, err))
		}
	}
	return errs
}

// run runs a host command, returning its output in the error when it fails.
func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// setUpNetwork creates the bridge with the node's address (the CNI bridge plugin
// adopts it) and the one rule that makes the `kubernetes` ClusterIP reach the API
// server, which stands in for kube-proxy.
func setUpNetwork() error {
	if _, err := run("ip", "link", "add", Bridge, "type", "bridge"); err != nil {
		return err
	}
	if _, err := run("ip", "addr", "add", NodeIP+"/24", "dev", Bridge); err != nil {
		return err
	}
	if _, err := run("ip", "link", "set", Bridge, "up"); err != nil {
		return err
	}
	_, err := run("iptables", dnatRule("-A")...)
	return err
}

func dnatRule(op string) []string {
	return []string{"-w", "5", "-t", "nat", op, "PREROUTING", "-d", KubernetesServiceIP + "/32", "-p", "tcp", "--dport", "443",
		"-m", "comment", "--comment", ruleComment, "-j", "DNAT", "--to-destination", NodeIP + ":" + strconv.Itoa(APIServerPort)}
}

// tearDownNetwork removes every rule carrying the cluster's comment and the bridge,
// tolerating either being gone already.
func tearDownNetwork() []error {
	var errs []error
	for _, table := range []string{"nat", "filter"} {
		out, err := exec.Command("iptables-save", "-t", table).Output()
		if err != nil {
			continue // no iptables: nothing was added
		}
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(line, "-A ") || !strings.Contains(line, ruleComment) {
				continue
			}
			args := append([]string{"-w", "5", "-t", table, "-D"}, splitRule(strings.TrimPrefix(line, "-A "))...)
			if _, err := run("iptables", args...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		if _, err := run("ip", "link", "del", Bridge); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// splitRule splits an iptables-save rule into arguments, keeping quoted words whole.
func splitRule(s string) []string {
	var args []string
	var cur strings.Builder
	quoted := false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ' ' && !quoted:
			if cur.Len() > 0 {
				args = append(args, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		args = append(args, cur.String())
	}
	return args
}

// mount is one line of /proc/self/mountinfo: where, and the file system type.
type mount struct {
	point, fsType string
}

// mounts reads the host's mount table; an unreadable one reads as empty.
func mounts() []mount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		m := mount{point: unescapeMount(fields[4])}
		// The optional fields end at " - ", after which comes the type.
		if sep := strings.Index(line, " - "); sep >= 0 {
			if after := strings.Fields(line[sep+3:]); len(after) > 0 {
				m.fsType = after[0]
			}
		}
		out = append(out, m)
	}
	return out
}

// MountsUnder lists the mount points at or below dir, deepest first.
func MountsUnder(dir string) []string {
	var under []string
	for _, m := range mounts() {
		if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
			under = append(under, m.point)
		}
	}
	sort.Slice(under, func(i, j int) bool { return len(under[i]) > len(under[j]) })
	return under
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// UnmountUnder unmounts everything at or below dir, lazily as a last resort (a mount
// a dying process still holds).
func UnmountUnder(dir string) []error {
	var errs []error
	for i := 0; i < 3; i++ {
		mounts := MountsUnder(dir)
		if len(mounts) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, mp := range mounts {
			if err := syscall.Unmount(mp, 0); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				if err2 := syscall.Unmount(mp, syscall.MNT_DETACH); err2 != nil {
					errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
				}
			}
		}
	}
	if left := MountsUnder(dir); len(left) > 0 {
		errs = append(errs, fmt.Errorf("still mounted under %s: %s", dir, strings.Join(left, ", ")))
	}
	return errs
}

// cgroupMounts returns the mount point of every cgroup hierarchy.
func cgroupMounts() []string {
	var dirs []string
	for _, m := range mounts() {
		if m.fsType == "cgroup" || m.fsType == "cgroup2" {
			dirs = append(dirs, m.point)
		}
	}
	return dirs
}

// kubepodsCgroups lists the kubelet's cgroup directories in every hierarchy, deepest
// first (the order rmdir needs).
func kubepodsCgroups() []string {
	var dirs []string
	for _, m := range cgroupMounts() {
		root := filepath.Join(m, "kubepods")
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	return dirs
}

// killKubepods kills every process in the kubelet's cgroups (containers whose shim
// died with containerd) and removes the cgroups.
func killKubepods() []error {
	for i := 0; i < 20; i++ {
		pids := map[int]bool{}
		for _, d := range kubepodsCgroups() {
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids[pid] = true
				}
			}
		}
		if len(pids) == 0 {
			break
		}
		for pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var errs []error
	for _, d := range kubepodsCgroups() {
		var err error
		for i := 0; i < 20; i++ {
			// A cgroup whose last process just died may be busy for a moment.
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errs
}

// processesMentioning returns the pids whose command line contains s (the run's
// directory: every component, shim and runc names it).
func processesMentioning(s string) []int {
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killAll sends SIGKILL to pids and waits until they are gone.
func killAll(pids []int) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	waitGone(pids, 10*time.Second)
}

// waitGone waits until none of pids is alive (a zombie counts as gone).
func waitGone(pids []int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		alive := false
		for _, pid := range pids {
			if processAlive(pid) {
				alive = true
				break
			}
		}
		if !alive {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}
