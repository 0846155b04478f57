package controlplane

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// Usage is what the control plane has done and holds at one moment, for measuring
// what a workload costs it: take one before and one after, and subtract.
type Usage struct {
	// Requests is apiserver_request_total summed over every label.
	Requests float64
	// Watches is the watches open now (apiserver_longrunning_requests{verb="WATCH"}).
	Watches float64
	// APIServerCPU and EtcdCPU are the processes' user plus system time so far.
	APIServerCPU, EtcdCPU time.Duration
	// APIServerRSS is kube-apiserver's resident memory now, in bytes.
	APIServerRSS int64
}

// Sub returns the counters' growth from earlier to u; the gauges (watches, memory)
// are u's own.
func (u Usage) Sub(earlier Usage) Usage {
	return Usage{Requests: u.Requests - earlier.Requests, Watches: u.Watches, APIServerCPU: u.APIServerCPU - earlier.APIServerCPU,
		EtcdCPU: u.EtcdCPU - earlier.EtcdCPU, APIServerRSS: u.APIServerRSS}
}

// Usage reads the API server's metrics and both processes' /proc entries.
func (cp *ControlPlane) Usage(ctx context.Context) (Usage, error) {
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return Usage{}, err
	}
	raw, err := client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return Usage{}, fmt.Errorf("failed to read the API server's metrics: %w", err)
	}
	var u Usage
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "apiserver_request_total{"):
			u.Requests += lastFloat(line)
		case strings.HasPrefix(line, "apiserver_longrunning_requests{") && strings.Contains(line, `verb="WATCH"`):
			u.Watches += lastFloat(line)
		}
	}
	if u.APIServerCPU, err = cpuTime(cp.apiserver.Pid()); err != nil {
		return Usage{}, err
	}
	if u.EtcdCPU, err = cpuTime(cp.etcd.Pid()); err != nil {
		return Usage{}, err
	}
	rss, err := ProcStatusKiB(cp.apiserver.Pid(), "VmRSS:")
	u.APIServerRSS = int64(rss) << 10
	return u, err
}

func lastFloat(line string) float64 {
	f := strings.Fields(line)
	v, _ := strconv.ParseFloat(f[len(f)-1], 64)
	return v
}

// cpuTime is a process's user plus system time (/proc/<pid>/stat, in Linux's USER_HZ
// of 100 ticks a second).
func cpuTime(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is parenthesised and may hold spaces;
	// utime and stime are the 14th and 15th of the line.
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, err1 := strconv.Atoi(f[11])
	stime, err2 := strconv.Atoi(f[12])
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unreadable /proc/%d/stat: %q", pid, s)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// ProcStatusKiB reads one KiB field (VmRSS:, VmHWM:) of /proc/<pid>/status.
func ProcStatusKiB(pid int, field string) (int, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
