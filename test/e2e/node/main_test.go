// Package node tests trustsync on a real one-node cluster (kubelet, containerd, runc,
// CNI) started by hack/cluster.sh, with trustsync's own image installed by its chart as
// a user would: everything a pod experiences is observed from inside the pod.
//
// The tests share one cluster and one chart installation and run in file order; the
// uninstall tests come last (uninstall_test.go), the host-cleanliness test after them.
package node

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/trustsync/trustsync/test/cluster"
)

var (
	node     *cluster.Node
	startErr error
	before   cluster.Snapshot
	stopped  bool
)

func TestMain(m *testing.M) {
	before = cluster.TakeSnapshot()
	node, startErr = cluster.StartNode()
	code := m.Run()
	if node != nil && !stopped {
		if err := node.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// theNode returns the running node, failing the test with the start-up error (and
// the failing component's log tail) when it did not start: never a skip.
func theNode(t testing.TB) *cluster.Node {
	t.Helper()
	if startErr != nil {
		t.Fatalf("the node did not start: %v", startErr)
	}
	if stopped {
		t.Fatal("the node was stopped by an earlier test")
	}
	return node
}

const (
	release          = "trustsync"
	releaseNamespace = "trustsync-system"
)

var (
	chartOnce sync.Once
	chartErr  error
	// installTook is how long the first `helm install --wait` took.
	installTook time.Duration
)

// installChart installs the chart with its defaults, exactly as docs/install.md says,
// once for the package.
func installChart(t testing.TB) *cluster.Node {
	t.Helper()
	n := theNode(t)
	chartOnce.Do(func() {
		start := time.Now()
		chartErr = helmInstall(n)
		installTook = time.Since(start)
	})
	if chartErr != nil {
		t.Fatalf("helm install: %v", chartErr)
	}
	return n
}

func helmInstall(n *cluster.Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, err := n.Run(ctx, "helm", append([]string{"install", release, "charts/trustsync", "-n", releaseNamespace, "--create-namespace", "--wait", "--timeout", "3m"}, n.ChartValues()...)...)
	return err
}
