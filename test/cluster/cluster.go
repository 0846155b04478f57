// Package cluster runs a real one-node Kubernetes cluster on the test machine: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, containerd (with runc and
// the CNI bridge) and a kubelet, all from binaries hack/ builds from the Go module
// proxy, with images imported from tarballs instead of pulled.
//
// Up starts it in a directory and returns once the node is Ready; the components are
// detached, so the cluster outlives the process that started it (hack/cluster.sh up).
// Down stops everything Up started, also after any part of it crashed, and puts the
// host back as Up found it: processes, mounts, the bridge, iptables rules, cgroups,
// sysctls and the few host paths the kubelet and libcni insist on.
//
// The machine's quirks and their work-arounds are in docs/development.md.
package cluster

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/trustsync/trustsync/test/fixtures"
)

// NodeName is the one node's name.
const NodeName = "trustsync-node"

// PauseImage is the sandbox image containerd is configured with; Up imports it.
const PauseImage = "trustsync.test/pause:1"

// ShellImage is a static busybox that runs as any uid, for app containers in tests.
const ShellImage = "trustsync.test/shell:1"

// components in start order; Down stops them in reverse.
var components = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "containerd", "kubelet"}

// Options say where the binaries and images are.
type Options struct {
	// Bin holds the control-plane and node binaries (bin/ after hack/controlplane.sh
	// and hack/node.sh), CNI plugins in Bin/cni.
	Bin string
	// Images are tarballs to import into the node before the kubelet starts.
	Images []string
	// Log receives progress lines; nil discards them.
	Log func(format string, args ...any)
}

// Up starts a cluster in dir (created if missing; it must not hold a running one).
// On failure it stops what it started and returns an error holding the failing
// component's log tail.
func Up(dir string, o Options) (err error) {
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if os.Geteuid() != 0 {
		return errors.New("the node needs root (network, mounts, cgroups): run as root")
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	if err := takeMachine(dir, o.Log); err != nil {
		return err
	}
	// A cluster starts empty: state from an earlier `up` in the same directory would
	// not match the certificates made anew (images/, written by the caller, stays).
	for _, d := range []string{"logs", "run", "pki", "etcd", "containerd", "kubelet", "pod-logs", "cni"} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			return fmt.Errorf("clear %s from an earlier run: %w", d, err)
		}
	}
	for _, d := range []string{"logs", "run", "pki", "etcd", "containerd", "kubelet", "pod-logs", "cni/net.d"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	c := &node{dir: dir, o: o}
	defer func() {
		if err != nil {
			o.Log("start failed; stopping what started")
			_ = Down(dir)
		}
	}()
	if err := recordHost().save(c.path("run/host-state.json")); err != nil {
		return err
	}
	steps := []struct {
		name string
		fn   func() error
	}{
		{"mount propagation", c.shareMounts},
		{"network", setUpNetwork},
		{"certificates", c.writePKI},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"kube-controller-manager", c.startControllerManager},
		{"kube-scheduler", c.startScheduler},
		{"containerd", c.startContainerd},
		{"images", c.importImages},
		{"kubelet", c.startKubelet},
		{"node Ready", c.waitNodeReady},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		o.Log("%s ready in %.1fs", s.name, time.Since(start).Seconds())
	}
	return nil
}

// shareMounts makes dir a shared mount (bound onto itself): a CSI driver's pod mounts
// the kubelet's pods directory and its own data directory, both under dir, with
// Bidirectional propagation, which runc allows only from a shared mount, so that the
// mounts it makes for pods reach the kubelet and the pods. This machine's / is
// private; a node's /var/lib/kubelet usually is shared by systemd. Down's
// unmountUnder takes the bind away with everything else under dir.
func (c *node) shareMounts() error {
	if err := syscall.Mount(c.dir, c.dir, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s onto itself: %w", c.dir, err)
	}
	if err := syscall.Mount("", c.dir, "", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", c.dir, err)
	}
	return nil
}

// takeMachine claims the machine for dir: one node per machine (fixed bridge and
// cgroup root). What an earlier run left behind, crashed or not stopped, is cleaned
// first unless its components still run.
func takeMachine(dir string, logf func(string, ...any)) error {
	if prev, err := os.ReadFile(markerPath); err == nil {
		prevDir := strings.TrimSpace(string(prev))
		if alive := runningComponents(prevDir); len(alive) > 0 {
			return fmt.Errorf("a node is already up in %s (%s running): run `hack/cluster.sh down %s` first", prevDir, strings.Join(alive, ", "), prevDir)
		}
		logf("cleaning up after the node last started in %s", prevDir)
		if err := Down(prevDir); err != nil {
			return fmt.Errorf("cleaning up after the node in %s: %w", prevDir, err)
		}
	}
	// Leftovers with no marker (a crash before it was written): the bridge or rules.
	if errs := tearDownNetwork(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	return os.WriteFile(markerPath, []byte(dir+"\n"), 0o644)
}

// runningComponents lists the components of dir whose recorded process is alive.
func runningComponents(dir string) []string {
	var alive []string
	for _, name := range components {
		if pid, ok := readPid(dir, name); ok && processAlive(pid) {
			alive = append(alive, name)
		}
	}
	return alive
}

func readPid(dir, name string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "run", name+".pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil && pid > 0
}

// Down stops the cluster in dir and restores the host. It is safe after a crash of
// any component, after a failed Up, and when nothing runs; it reports what it could
// not clean, having tried everything.
func Down(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	var errs []error
	// The kubelet first, so it does not restart what is being stopped; then the
	// containers it ran (their shims outlive containerd); then the rest.
	stop(dir, "kubelet", 15*time.Second)
	killAll(processesMentioning(filepath.Join(dir, "containerd")))
	errs = append(errs, killKubepods()...)
	for i := len(components) - 1; i >= 0; i-- {
		stop(dir, components[i], 15*time.Second)
	}
	// Anything else still naming the run (a shim re-parented to init, a runc).
	killAll(processesMentioning(dir + "/"))
	errs = append(errs, killKubepods()...)
	errs = append(errs, UnmountUnder(dir)...)
	errs = append(errs, tearDownNetwork()...)
	if st, err := loadHostState(filepath.Join(dir, "run", "host-state.json")); err == nil {
		errs = append(errs, st.restore()...)
	}
	// libcni's cache of this network's results, if /var/lib/cni was there before.
	if matches, _ := filepath.Glob("/var/lib/cni/results/trustsync-*"); len(matches) > 0 {
		for _, m := range matches {
			_ = os.Remove(m)
		}
	}
	_ = os.RemoveAll(shimSocketDir)
	if b, err := os.ReadFile(markerPath); err == nil && strings.TrimSpace(string(b)) == dir {
		_ = os.Remove(markerPath)
	}
	return errors.Join(errs...)
}

// stop sends SIGTERM to a component, then SIGKILL after grace.
func stop(dir, name string, grace time.Duration) {
	pid, ok := readPid(dir, name)
	if !ok || !processAlive(pid) {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if !waitGone([]int{pid}, grace) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		waitGone([]int{pid}, 5*time.Second)
	}
}

// node is a cluster being started.
type node struct {
	dir      string
	o        Options
	etcdURL  string
	procs    map[string]*proc
	admin    *kubernetes.Clientset
	clientCA *fixtures.Cert
}

func (c *node) path(p string) string { return filepath.Join(c.dir, p) }

func (c *node) bin(name string) string { return filepath.Join(c.o.Bin, name) }

// proc is a detached component: its own session, so it outlives Up, and a pid file
// for Down.
type proc struct {
	name   string
	log    string
	exited chan struct{}
}

func (c *node) start(name string, env []string, args ...string) (*proc, error) {
	logPath := c.path("logs/" + name + ".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(c.bin(name), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	if err := os.WriteFile(c.path("run/"+name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return nil, err
	}
	p := &proc{name: name, log: logPath, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	if c.procs == nil {
		c.procs = map[string]*proc{}
	}
	c.procs[name] = p
	return p, nil
}

// waitFor polls ready until it holds, the process exits, or timeout passes; failures
// carry the component's log tail.
func (c *node) waitFor(p *proc, timeout time.Duration, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited; last lines of %s:\n%s", p.name, p.log, Tail(p.log, 3000))
		default:
		}
		if ready() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s; last lines of %s:\n%s", p.name, timeout, p.log, Tail(p.log, 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// hostEnv is the environment for components: a PATH without the iptables binaries, so
// the kubelet adds no chains of its own to the host's tables.
func (c *node) hostEnv() []string {
	return []string{"PATH=" + c.o.Bin + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + c.dir}
}

func (c *node) writePKI() error {
	servingCA := fixtures.MustNew(fixtures.Options{CommonName: "trustsync-node-serving-ca"})
	c.clientCA = fixtures.MustNew(fixtures.Options{CommonName: "trustsync-node-client-ca"})
	serving := fixtures.MustNew(fixtures.Options{
		CommonName: "kube-apiserver", Leaf: true, Parent: servingCA,
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP(NodeIP), net.ParseIP(KubernetesServiceIP), net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	saKey := fixtures.MustNew(fixtures.Options{CommonName: "service-accounts", Leaf: true})
	pubDER, err := x509.MarshalPKIXPublicKey(saKey.Key.Public())
	if err != nil {
		return err
	}
	kubeletClient := c.clientCert("kube-apiserver-kubelet-client", "system:masters")
	files := map[string][]byte{
		"pki/serving-ca.crt":     servingCA.CertPEM(),
		"pki/serving.crt":        serving.CertPEM(),
		"pki/serving.key":        serving.KeyPEM(),
		"pki/client-ca.crt":      c.clientCA.CertPEM(),
		"pki/sa.key":             saKey.KeyPEM(),
		"pki/sa.pub":             pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}),
		"pki/kubelet-client.crt": kubeletClient.CertPEM(),
		"pki/kubelet-client.key": kubeletClient.KeyPEM(),
	}
	for name, data := range files {
		if err := os.WriteFile(c.path(name), data, 0o600); err != nil {
			return err
		}
	}
	// One kubeconfig per identity; the admin's is the one users and tests take.
	users := []struct{ file, user, group string }{
		{"kubeconfig", "trustsync-admin", "system:masters"},
		{"pki/controller-manager.kubeconfig", "system:kube-controller-manager", "system:masters"},
		{"pki/scheduler.kubeconfig", "system:kube-scheduler", "system:masters"},
		// The Node authorizer and NodeRestriction see the kubelet as the node it is,
		// which is what PodCertificateRequests are checked against.
		{"pki/kubelet.kubeconfig", "system:node:" + NodeName, "system:nodes"},
	}
	for _, u := range users {
		if err := c.writeKubeconfig(c.path(u.file), c.clientCert(u.user, u.group), servingCA); err != nil {
			return err
		}
	}
	return nil
}

func (c *node) clientCert(user, group string) *fixtures.Cert {
	return fixtures.MustNew(fixtures.Options{
		CommonName: user, Organization: []string{group}, Leaf: true, Parent: c.clientCA,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		NotAfter:    time.Now().Add(10 * 365 * 24 * time.Hour),
	})
}

// APIServerURL is where the API server listens: the node's address.
func APIServerURL() string { return "https://" + net.JoinHostPort(NodeIP, strconv.Itoa(APIServerPort)) }

func (c *node) writeKubeconfig(path string, cert, ca *fixtures.Cert) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["trustsync"] = &clientcmdapi.Cluster{Server: APIServerURL(), CertificateAuthorityData: ca.CertPEM()}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert.CertPEM(), ClientKeyData: cert.KeyPEM()}
	cfg.Contexts["trustsync"] = &clientcmdapi.Context{Cluster: "trustsync", AuthInfo: "user"}
	cfg.CurrentContext = "trustsync"
	return clientcmd.WriteToFile(*cfg, path)
}

// FreePort returns a loopback port free at the time of asking, chosen below the
// kernel's ephemeral range. A port the kernel hands out for ":0" comes from the same
// range as the source ports of outgoing connections, so between asking and binding a
// client (kube-apiserver dialling etcd, a test's own requests) can take it: that was
// "bind: address already in use" from etcd, now and then, in a long run.
func FreePort() (int, error) {
	low := ephemeralLow()
	const floor = 10000
	for range 200 {
		port := floor + rand.IntN(low-floor)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free loopback port between %d and %d after 200 tries", floor, low)
}

// ephemeralLow is where the kernel's ephemeral ports begin (Linux's default when it
// cannot be read).
func ephemeralLow() int {
	low := 32768
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return low
	}
	if f := strings.Fields(string(data)); len(f) == 2 {
		if n, err := strconv.Atoi(f[0]); err == nil && n > 10001 {
			low = n
		}
	}
	return low
}

func (c *node) startEtcd() error {
	clientPort, err := FreePort()
	if err != nil {
		return err
	}
	peerPort, err := FreePort()
	if err != nil {
		return err
	}
	c.etcdURL = "http://127.0.0.1:" + strconv.Itoa(clientPort)
	// Written down for the tests, which look for keys where etcd keeps them.
	if err := os.WriteFile(c.path(EtcdURLFile), []byte(c.etcdURL), 0o644); err != nil {
		return err
	}
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	p, err := c.start("etcd", c.hostEnv(),
		"--name=node", "--data-dir="+c.path("etcd"),
		"--listen-client-urls="+c.etcdURL, "--advertise-client-urls="+c.etcdURL,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=node="+peer,
		// Test data need not survive a power cut; fsync would dominate test time.
		"--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		return err
	}
	return c.waitFor(p, 60*time.Second, func() bool {
		resp, err := http.Get(c.etcdURL + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// CriticalPriorityAdmission limits the critical priority classes as GKE does: the
// ResourceQuota admission refuses a pod of system-node-critical or
// system-cluster-critical in a namespace whose quotas do not cover that class
// (kube-system gets one from GKE). A chart's critical pods install here as on GKE.
const CriticalPriorityAdmission = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ResourceQuota
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: ResourceQuotaConfiguration
    limitedResources:
    - resource: pods
      matchScopes:
      - scopeName: PriorityClass
        operator: In
        values: [system-node-critical, system-cluster-critical]
`

func (c *node) startAPIServer() error {
	if err := os.WriteFile(c.path("admission.yaml"), []byte(CriticalPriorityAdmission), 0o644); err != nil {
		return err
	}
	p, err := c.start("kube-apiserver", c.hostEnv(),
		"--etcd-servers="+c.etcdURL,
		"--bind-address="+NodeIP, "--advertise-address="+NodeIP, "--secure-port="+strconv.Itoa(APIServerPort),
		"--cert-dir="+c.path("pki/apiserver"),
		"--tls-cert-file="+c.path("pki/serving.crt"), "--tls-private-key-file="+c.path("pki/serving.key"),
		"--client-ca-file="+c.path("pki/client-ca.crt"),
		"--kubelet-client-certificate="+c.path("pki/kubelet-client.crt"), "--kubelet-client-key="+c.path("pki/kubelet-client.key"),
		// No cluster DNS: the API server reaches the kubelet by address, not node name.
		"--kubelet-preferred-address-types=InternalIP",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--admission-control-config-file="+c.path("admission.yaml"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+c.path("pki/sa.pub"),
		"--service-account-signing-key-file="+c.path("pki/sa.key"),
		"--service-cluster-ip-range="+ServiceCIDR,
		"--allow-privileged=true",
		// No kube-proxy: webhooks and services/proxy are called at endpoint IPs.
		"--enable-aggregator-routing=true",
		"--profiling=false", "--v=1")
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.path("kubeconfig"))
	if err != nil {
		return err
	}
	if c.admin, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	return c.waitFor(p, 60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		body, err := c.admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok"
	})
}

func (c *node) startControllerManager() error {
	p, err := c.start("kube-controller-manager", c.hostEnv(),
		"--kubeconfig="+c.path("pki/controller-manager.kubeconfig"),
		"--service-account-private-key-file="+c.path("pki/sa.key"),
		"--root-ca-file="+c.path("pki/serving-ca.crt"),
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0",
		"--cluster-name=trustsync", "--v=1")
	if err != nil {
		return err
	}
	return c.stillRunning(p)
}

func (c *node) startScheduler() error {
	p, err := c.start("kube-scheduler", c.hostEnv(),
		"--kubeconfig="+c.path("pki/scheduler.kubeconfig"),
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0", "--v=1")
	if err != nil {
		return err
	}
	return c.stillRunning(p)
}

// stillRunning gives a component that has no readiness endpoint here a moment to fail
// on its flags.
func (c *node) stillRunning(p *proc) error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited; last lines of %s:\n%s", p.name, p.log, Tail(p.log, 3000))
	case <-time.After(500 * time.Millisecond):
		return nil
	}
}

func (c *node) containerdSocket() string { return c.path("containerd/containerd.sock") }

func (c *node) startContainerd() error {
	if err := os.WriteFile(c.path("cni/net.d/10-trustsync.conflist"), []byte(cniConfig(c.dir)), 0o644); err != nil {
		return err
	}
	cfg := containerdConfig(c.dir, c.o.Bin)
	if err := os.WriteFile(c.path("containerd/config.toml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	p, err := c.start("containerd", c.hostEnv(), "--config="+c.path("containerd/config.toml"))
	if err != nil {
		return err
	}
	return c.waitFor(p, 60*time.Second, func() bool {
		conn, err := net.Dial("unix", c.containerdSocket())
		if err != nil {
			return false
		}
		conn.Close()
		return true
	})
}

func (c *node) importImages() error {
	for _, img := range c.o.Images {
		out, err := exec.Command(c.bin("ctr"), "--address", c.containerdSocket(), "-n", "k8s.io",
			"images", "import", img).CombinedOutput()
		if err != nil {
			return fmt.Errorf("import %s: %w: %s", img, err, out)
		}
	}
	return nil
}

func (c *node) startKubelet() error {
	if err := os.WriteFile(c.path("kubelet/config.yaml"), []byte(kubeletConfig(c.dir)), 0o644); err != nil {
		return err
	}
	_, err := c.start("kubelet", c.hostEnv(),
		"--config="+c.path("kubelet/config.yaml"),
		"--kubeconfig="+c.path("pki/kubelet.kubeconfig"),
		"--root-dir="+c.path("kubelet"), "--cert-dir="+c.path("kubelet/pki"),
		"--hostname-override="+NodeName, "--node-ip="+NodeIP, "--v=2")
	return err
}

func (c *node) waitNodeReady() error {
	p := c.procs["kubelet"]
	return c.waitFor(p, 120*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n, err := c.admin.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue
			}
		}
		return false
	})
}

// Tail returns the last n bytes of a file, for error messages.
func Tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, 2)
	}
	b := make([]byte, n)
	k, _ := f.Read(b)
	return string(b[:k])
}
