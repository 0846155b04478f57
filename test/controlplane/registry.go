package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/trustsync/trustsync/test/fixtures"
)

// Registry is a real OCI registry (go-containerregistry's) serving on 127.0.0.1 over
// TLS with a CA of its own, as a private registry does.
type Registry struct {
	// Host is host:port, as image references and helm's oci:// name it.
	Host string
	CA   *fixtures.Cert
	// CAFile holds the CA's PEM, for SSL_CERT_FILE or a containerd hosts.toml.
	CAFile string
}

// StartRegistry serves a registry until the test ends.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	ca := fixtures.CA("test registry CA")
	leaf, err := fixtures.New(fixtures.Options{CommonName: "registry", Leaf: true, Parent: ca,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(leaf.CertPEM(), leaf.KeyPEM())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	r := &Registry{Host: srv.Listener.Addr().String(), CA: ca, CAFile: filepath.Join(t.TempDir(), "registry-ca.pem")}
	if err := os.WriteFile(r.CAFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}
