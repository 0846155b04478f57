package bundle

import (
	"os/exec"
	"strings"
	"testing"
)

// The domain packages stay free of API access: the injector is a pure function of
// (pod, config), and the policy, the sources contract and this package are rules about
// data. Linking client-go would bring its clients, caches and workqueues into all of
// them (and into the webhook's admission path) for nothing; API access lives in
// bundle/bundleapi and kubeapi.
func TestDomainPackagesLinkNoClientGo(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	for _, pkg := range []string{"bundle", "policy", "injector", "delivery/contract"} {
		out, err := exec.Command(goBin, "list", "-deps", "github.com/trustsync/trustsync/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "k8s.io/client-go") {
				t.Errorf("%s links %s; keep API access in bundle/bundleapi or kubeapi", pkg, dep)
			}
		}
	}
}
