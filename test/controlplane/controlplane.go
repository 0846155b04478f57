// Package controlplane runs a real etcd and kube-apiserver on loopback for trustsync's
// end-to-end tests: real TLS, client-certificate users, RBAC and the default admission
// plugins (PodSecurity, ServiceAccount and ValidatingAdmissionPolicy among them). No
// controller-manager runs, so the harness creates what it would have: the default
// ServiceAccount of each namespace it makes.
//
// Start one control plane per test package, from TestMain: the machine has 2 cores.
package controlplane

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/fixtures"
)

// Options choose what kind of cluster to start.
type Options struct {
	// NoNative turns the certificates.k8s.io ClusterTrustBundle API off, as on a
	// managed cluster of an older version; only the mirror CRD can serve bundles then.
	NoNative bool
	// ExtraAPIServerFlags are appended to kube-apiserver's command line.
	ExtraAPIServerFlags []string
}

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	// Dir holds data, certificates and logs; it is removed by Stop.
	Dir string
	// Host is the API server's URL.
	Host string

	opts       Options
	servingCA  *fixtures.Cert
	clientCA   *fixtures.Cert
	etcd       *Process
	etcdURL    string
	apiserver  *Process
	apiArgs    []string
	bin        string
	adminOnce  sync.Once
	adminCfg   *rest.Config
	stopOnce   sync.Once
	apiLogPath string
}

// Start starts etcd and kube-apiserver and waits until the API server is ready.
func Start(opts Options) (*ControlPlane, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "trustsync-controlplane-")
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Dir: dir, opts: opts, bin: bin, apiLogPath: filepath.Join(dir, "kube-apiserver.log")}
	if err := cp.start(); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

func (cp *ControlPlane) start() error {

	if err := cp.writePKI(); err != nil {
		return err
	}
	etcdURL, err := cp.startEtcd()
	if err != nil {
		return err
	}
	cp.etcdURL = etcdURL
	port, err := FreePort()
	if err != nil {
		return err
	}
	cp.Host = "https://127.0.0.1:" + strconv.Itoa(port)
	cp.apiArgs = cp.apiServerArgs(etcdURL, port)
	if err := cp.StartAPIServer(); err != nil {
		return err
	}
	return cp.CreateNamespace(context.Background(), "default", nil)
}

// BinDir finds the control-plane binaries: $TRUSTSYNC_BIN_DIR, else bin/ at the top of
// the module. `make controlplane` puts them there.
func BinDir() (string, error) {
	dir, err := binDir()
	if err != nil {
		return "", err
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("control-plane binary %s not found in %s: run `make controlplane` first (or set TRUSTSYNC_BIN_DIR): %w", b, dir, err)
		}
	}
	return dir, nil
}

// Tool is the path of a test tool `make test-tools` linked into the binaries'
// directory (local-kms, promtool, ...), without the control plane, which unit tests
// that use a tool do not need.
func Tool(name string) (string, error) {
	dir, err := binDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s not found in %s: run `make test-tools` first (or set TRUSTSYNC_BIN_DIR): %w", name, dir, err)
	}
	return path, nil
}

// binDir is $TRUSTSYNC_BIN_DIR, else bin/ at the top of the module.
func binDir() (string, error) {
	if dir := os.Getenv("TRUSTSYNC_BIN_DIR"); dir != "" {
		return dir, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			// Nested tool modules live under hack/; the project's is the one with cmd/.
			if _, err := os.Stat(filepath.Join(dir, "cmd")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the trustsync module root above the working directory")
		}
		dir = parent
	}
}

func (cp *ControlPlane) path(name string) string { return filepath.Join(cp.Dir, name) }

func (cp *ControlPlane) writePKI() error {
	var err error
	if cp.servingCA, err = fixtures.New(fixtures.Options{CommonName: "trustsync-e2e-serving-ca"}); err != nil {
		return err
	}
	if cp.clientCA, err = fixtures.New(fixtures.Options{CommonName: "trustsync-e2e-client-ca"}); err != nil {
		return err
	}
	serving, err := fixtures.New(fixtures.Options{
		CommonName: "kube-apiserver", Leaf: true, Parent: cp.servingCA,
		DNSNames: []string{"localhost", "kubernetes.default.svc"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return err
	}
	saKey, err := fixtures.New(fixtures.Options{CommonName: "service-accounts", Leaf: true})
	if err != nil {
		return err
	}
	// kube-apiserver reads verification keys only as public keys or legacy private
	// key blocks, not PKCS#8.
	pubDER, err := x509.MarshalPKIXPublicKey(saKey.Key.Public())
	if err != nil {
		return err
	}
	saPub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	files := map[string][]byte{
		"serving.crt":    serving.CertPEM(),
		"serving.key":    serving.KeyPEM(),
		"client-ca.crt":  cp.clientCA.CertPEM(),
		"serving-ca.crt": cp.servingCA.CertPEM(),
		"sa.key":         saKey.KeyPEM(),
		"sa.pub":         saPub,
	}
	for name, data := range files {
		if err := os.WriteFile(cp.path(name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (cp *ControlPlane) startEtcd() (string, error) {
	clientPort, err := FreePort()
	if err != nil {
		return "", err
	}
	peerPort, err := FreePort()
	if err != nil {
		return "", err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	logPath := cp.path("etcd.log")
	cp.etcd, err = StartProcess("etcd", filepath.Join(cp.bin, "etcd"), []string{
		"--name=e2e", "--data-dir=" + cp.path("etcd"),
		"--listen-client-urls=" + clientURL, "--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=e2e=" + peerURL,
		// Test data need not survive a power cut; fsync would dominate test time.
		"--unsafe-no-fsync", "--log-level=warn",
	}, logPath)
	if err != nil {
		return "", err
	}
	err = cp.waitFor("etcd", cp.etcd, logPath, func() bool {
		resp, err := http.Get(clientURL + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return clientURL, err
}

func (cp *ControlPlane) apiServerArgs(etcdURL string, port int) []string {
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + cp.path("apiserver-certs"),
		"--tls-cert-file=" + cp.path("serving.crt"), "--tls-private-key-file=" + cp.path("serving.key"),
		"--client-ca-file=" + cp.path("client-ca.crt"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + cp.path("sa.pub"),
		"--service-account-signing-key-file=" + cp.path("sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--allow-privileged=true",
		// The kubernetes Service endpoint may not be loopback; nothing here needs it.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--v=1",
	}
	if cp.opts.NoNative {
		// The projection gate depends on the API's, so both go off together.
		args = append(args, "--feature-gates=ClusterTrustBundle=false,ClusterTrustBundleProjection=false")
	}
	return append(args, cp.opts.ExtraAPIServerFlags...)
}

// StartAPIServer starts kube-apiserver (again) on its address and waits until ready.
func (cp *ControlPlane) StartAPIServer() error {
	if cp.apiserver != nil && !cp.apiserver.Exited() {
		return errors.New("kube-apiserver is already running")
	}
	var err error
	cp.apiserver, err = StartProcess("kube-apiserver", filepath.Join(cp.bin, "kube-apiserver"), cp.apiArgs, cp.apiLogPath)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	return cp.waitFor("kube-apiserver", cp.apiserver, cp.apiLogPath, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok"
	})
}

// StopAPIServer stops kube-apiserver, leaving etcd (and so every object) in place.
func (cp *ControlPlane) StopAPIServer() {
	cp.apiserver.Stop(15 * time.Second)
}

// waitFor polls ready until it holds, the process exits, or two minutes pass.
func (cp *ControlPlane) waitFor(name string, p *Process, logPath string, ready func() bool) error {
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		if p.Exited() {
			return false, errExited
		}
		return ready(), nil
	})
	if err != nil {
		return fmt.Errorf("%s did not become ready (%v); last lines of %s:\n%s", name, err, logPath, tail(logPath, 4000))
	}
	return nil
}

// Stop stops kube-apiserver, then etcd, and removes the data directory. It is safe to
// call more than once.
func (cp *ControlPlane) Stop() {
	cp.stopOnce.Do(func() {
		cp.apiserver.Stop(15 * time.Second)
		cp.etcd.Stop(10 * time.Second)
		if os.Getenv("TRUSTSYNC_KEEP_CONTROLPLANE") == "" {
			_ = os.RemoveAll(cp.Dir)
		}
	})
}

// CreateNamespace creates a namespace with labels, and its default ServiceAccount
// (the controller-manager's job in a real cluster), tolerating both already existing.
func (cp *ControlPlane) CreateNamespace(ctx context.Context, name string, labels map[string]string) error {
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create namespace %q: %w", name, err)
	}
	return cp.ensureServiceAccount(ctx, client, name, "default")
}

// CreateServiceAccount creates namespace/name, tolerating its existence.
func (cp *ControlPlane) CreateServiceAccount(ctx context.Context, namespace, name string) error {
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	return cp.ensureServiceAccount(ctx, client, namespace, name)
}

func (cp *ControlPlane) ensureServiceAccount(ctx context.Context, client kubernetes.Interface, namespace, name string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if _, err := client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return nil
}

// FreePort returns a loopback port free at the time of asking (cluster.FreePort).
func FreePort() (int, error) { return cluster.FreePort() }

// Context returns a context for one test that ends with it, or after two minutes.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
