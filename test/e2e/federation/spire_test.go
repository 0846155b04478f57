package federation

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/bundleapi"
	"github.com/trustsync/trustsync/signer"
	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/poll"
)

const tdSPIRE = "spire.example"

// spireServer is a real SPIRE server (v1.13.3, built pinned by hack/controlplane.sh)
// of trust domain spire.example, serving its bundle endpoint (https_spiffe) and
// federating with B's trustsync signer.
type spireServer struct {
	bin, socket string
	endpoint    string // its bundle endpoint, host:port
	process     *controlplane.Process
}

func startSPIRE(t *testing.T, trustsyncEndpoint string) *spireServer {
	t.Helper()
	dir, err := controlplane.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	s := &spireServer{bin: filepath.Join(dir, "spire-server")}
	if _, err := os.Stat(s.bin); err != nil {
		t.Fatalf("spire-server is not built (make test-tools): %v", err)
	}
	work := t.TempDir()
	// A unix socket path must stay short.
	sockDir, err := os.MkdirTemp("", "spire-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	s.socket = filepath.Join(sockDir, "api.sock")
	apiPort, _ := controlplane.FreePort()
	bundlePort, _ := controlplane.FreePort()
	s.endpoint = "127.0.0.1:" + strconv.Itoa(bundlePort)
	config := fmt.Sprintf(`server {
  bind_address = "127.0.0.1"
  bind_port = "%d"
  socket_path = %q
  trust_domain = %q
  data_dir = %q
  log_level = "DEBUG"
  ca_ttl = "24h"
  default_x509_svid_ttl = "1h"
  federation {
    bundle_endpoint {
      address = "127.0.0.1"
      port = %d
      refresh_hint = "5s"
      profile "https_spiffe" {}
    }
    federates_with %q {
      bundle_endpoint_url = "https://%s/%s"
      bundle_endpoint_profile "https_spiffe" {
        endpoint_spiffe_id = %q
      }
    }
  }
}
plugins {
  DataStore "sql" {
    plugin_data {
      database_type = "sqlite3"
      connection_string = %q
    }
  }
  KeyManager "memory" {
    plugin_data {}
  }
  NodeAttestor "join_token" {
    plugin_data {}
  }
}
`, apiPort, s.socket, tdSPIRE, filepath.Join(work, "data"), bundlePort, tdB, trustsyncEndpoint, tdB, v1alpha1.BundleEndpointID(tdB), filepath.Join(work, "data", "datastore.sqlite3"))
	path := filepath.Join(work, "server.conf")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := controlplane.StartProcess("spire-server", s.bin, []string{"run", "-config", path}, filepath.Join(work, "spire-server.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	s.process = p
	poll.Eventually(t, time.Minute, "SPIRE server healthy", func() (bool, string) {
		out, err := s.run(nil, "healthcheck")
		return err == nil, out + "\n" + p.Tail()
	})
	return s
}

// run runs a spire-server CLI command against the server's socket.
func (s *spireServer) run(stdin []byte, args ...string) (string, error) {
	cmd := exec.Command(s.bin, append(args, "-socketPath", s.socket)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Interoperability with SPIRE, both ways: a SPIRE server federates with B's trustsync
// signer (its bundle endpoint client authenticates trustsync's endpoint as
// spiffe://b.example/trustsync/bundle-endpoint and takes its bundle, sequence and all),
// and A's trustsync-controller imports the SPIRE server's bundle from SPIRE's own
// endpoint (authenticated as spiffe://spire.example/spire/server) into a
// ClusterTrustBundle pods can select.
func TestFederation_InteroperatesWithSPIREBothWays(t *testing.T) {
	c := start(t)
	live := c.liveB(t)
	spire := startSPIRE(t, c.endpoint)

	// SPIRE, given B's bundle to start from, keeps it from trustsync's endpoint.
	if out, err := spire.run([]byte(live.Spec.TrustBundle), "bundle", "set", "-format", "pem", "-id", "spiffe://"+tdB); err != nil {
		t.Fatalf("spire-server bundle set: %v\n%s", err, out)
	}
	spireHolds := func() ([]string, string) {
		out, err := spire.run(nil, "bundle", "list", "-id", "spiffe://"+tdB, "-format", "spiffe")
		if err != nil {
			return nil, out
		}
		got, err := spiffebundle.Parse(spiffeid.RequireTrustDomainFromString(tdB), []byte(strings.TrimSpace(out)))
		if err != nil {
			return nil, err.Error() + ": " + out
		}
		return v1alpha1.BundleAnchors(got), ""
	}
	// SPIRE polled once at start, before it had B's bundle to authenticate with; it
	// tries again a minute later, then at the refresh hint. Its own log says when it
	// took the bundle from trustsync's endpoint.
	poll.Eventually(t, 100*time.Second, "SPIRE refreshes B's bundle from trustsync's endpoint", func() (bool, string) {
		log, _ := os.ReadFile(spire.process.LogPath)
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, `msg="Bundle refreshed"`) && strings.Contains(line, "trust_domain="+tdB) {
				return true, ""
			}
		}
		return false, spire.process.Tail()
	})
	// B rotates: the next anchor, which the bundle SPIRE was given lacks, reaches SPIRE
	// through trustsync's endpoint before B's new CA signs.
	before := anchorIDs(t, live.Spec.TrustBundle)
	c.rotateB(t)
	var next string
	poll.Eventually(t, time.Minute, "B publishes its next CA", func() (bool, string) {
		for _, id := range anchorIDs(t, c.liveB(t).Spec.TrustBundle) {
			if !slices.Contains(before, id) {
				next = id
				return true, ""
			}
		}
		return false, "not yet"
	})
	published := time.Now()
	poll.Eventually(t, window, "SPIRE holds B's next anchor, fetched from trustsync's endpoint", func() (bool, string) {
		held, why := spireHolds()
		return slices.Contains(held, next), fmt.Sprintf("SPIRE holds %v %s; SPIRE's log:\n%s", held, why, spire.process.Tail())
	})
	if phase := c.phaseB(t); phase != string(signer.PhaseWaiting) {
		t.Fatalf("B's rotation was %s when SPIRE held the next anchor: B's new CA signed first", phase)
	}
	t.Logf("SPIRE held B's next anchor %.1f s after B published it", time.Since(published).Seconds())

	// A imports SPIRE's bundle from SPIRE's endpoint.
	doc, err := spire.run(nil, "bundle", "show", "-format", "spiffe")
	if err != nil {
		t.Fatalf("spire-server bundle show: %v\n%s", err, doc)
	}
	spireBundle, err := v1alpha1.ParseSPIFFEBundle(spiffeid.RequireTrustDomainFromString(tdSPIRE), []byte(doc))
	if err != nil {
		t.Fatalf("SPIRE's bundle: %v\n%s", err, doc)
	}
	peer := c.peer("spire", "https://"+spire.endpoint, doc)
	spec := peer.Object["spec"].(map[string]any)
	spec["trustDomain"] = tdSPIRE
	spec["bundleEndpointProfile"] = map[string]any{"type": v1alpha1.ProfileSPIFFE, "endpointSPIFFEID": "spiffe://" + tdSPIRE + "/spire/server"}
	if _, err := dyn(t, c.a).Resource(v1alpha1.FederatedTrustDomainResource).Create(context.Background(), peer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	store := bundleapi.NewStore(dyn(t, c.a), bundle.NativeV1)
	t.Cleanup(func() {
		_ = dyn(t, c.a).Resource(v1alpha1.FederatedTrustDomainResource).Delete(context.Background(), "spire", metav1.DeleteOptions{})
		_ = store.Delete(context.Background(), v1alpha1.FederatedBundleName(tdSPIRE), metav1.DeleteOptions{})
	})
	poll.Eventually(t, time.Minute, "A imports SPIRE's bundle from SPIRE's endpoint", func() (bool, string) {
		s := c.status(t, "spire")
		st, reason, msg := ready(s)
		return st == metav1.ConditionTrue && s.LastRefreshed != nil, string(st) + " " + reason + ": " + msg
	})
	imported, err := store.Get(context.Background(), v1alpha1.FederatedBundleName(tdSPIRE))
	if err != nil {
		t.Fatal(err)
	}
	if got := anchorIDs(t, imported.Spec.TrustBundle); !slices.Equal(got, v1alpha1.BundleAnchors(spireBundle)) {
		t.Errorf("A imported %v; SPIRE's X.509 authorities are %v", got, v1alpha1.BundleAnchors(spireBundle))
	}
}
