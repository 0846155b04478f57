// Command cluster starts and stops trustsync's one-node test cluster; hack/cluster.sh
// builds what it needs and calls it. See the test/cluster package.
//
//	cluster up DIR [--bin DIR] [--image TARBALL]...
//	cluster down DIR
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/trustsync/trustsync/test/cluster"
)

func main() {
	fs := pflag.NewFlagSet("cluster", pflag.ExitOnError)
	bin := fs.String("bin", "bin", "directory holding the control-plane and node binaries (CNI plugins in its cni/)")
	images := fs.StringArray("image", nil, "image tarball to import into the node (repeatable)")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: cluster up DIR [flags] | cluster down DIR\n\n%s", fs.FlagUsages())
	}
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() != 2 {
		fs.Usage()
		os.Exit(2)
	}
	verb, dir := fs.Arg(0), fs.Arg(1)
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[cluster] "+format+"\n", args...)
	}
	var err error
	switch verb {
	case "up":
		err = cluster.Up(dir, cluster.Options{Bin: *bin, Images: *images, Log: logf})
		if err == nil {
			logf("node Ready in %.1fs; kubeconfig: %s/kubeconfig", time.Since(start).Seconds(), dir)
		}
	case "down":
		err = cluster.Down(dir)
		if err == nil {
			logf("stopped in %.1fs; host restored", time.Since(start).Seconds())
		}
	default:
		fs.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster %s: %v\n", verb, err)
		os.Exit(1)
	}
}
