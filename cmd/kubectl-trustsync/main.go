// Command kubectl-trustsync is trustsync's kubectl plugin: where trust stands in the
// cluster, read from the nodes' reports with the user's own credentials. Copied onto
// PATH, it runs as `kubectl trustsync`.
package main

import (
	"os"

	"github.com/trustsync/trustsync/cmd/kubectl-trustsync/plugin"
)

func main() { os.Exit(plugin.Main(plugin.Args(os.Args), os.Stdout, os.Stderr)) }
