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
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trustsync/trustsync/test/cluster"
	"github.com/trustsync/trustsync/test/doccmd"
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

// installChart installs the chart once for the package by README's "On your own
// cluster" recipe, command by command as written: make image, the tarball imported
// into the node's containerd, the namespace created and labelled for the privileged
// agent, helm install. The one addition is the test node's kubelet directory on the
// helm line (ChartValues), which a user's default /var/lib/kubelet does not need.
func installChart(t testing.TB) *cluster.Node {
	t.Helper()
	n := theNode(t)
	chartOnce.Do(func() {
		start := time.Now()
		chartErr = readmeInstall(n)
		installTook = time.Since(start)
	})
	if chartErr != nil {
		t.Fatalf("helm install: %v", chartErr)
	}
	return n
}

func readmeInstall(n *cluster.Node) error {
	commands, err := doccmd.Block(filepath.Join(n.Root, "README.md"), "**On your own cluster**")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if err := installAsWritten(ctx, n, commands); err != nil {
		return fmt.Errorf("README's recipe: %w", err)
	}
	return nil
}

// installAsWritten runs the commands a doc teaches to install the chart, one by one
// as written, the test node's kubelet directory added to the helm install line
// (ChartValues); commands that install no chart are refused.
func installAsWritten(ctx context.Context, n *cluster.Node, commands []string) error {
	installed := false
	for _, c := range commands {
		if strings.HasPrefix(c, "helm install ") {
			c += " " + strings.Join(n.ChartValues(), " ")
			installed = true
		}
		if _, err := n.Shell(ctx, c); err != nil {
			return err
		}
	}
	if !installed {
		return fmt.Errorf("%q installs no chart", commands)
	}
	return nil
}
