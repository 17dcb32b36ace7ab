// Command spaced is the SPACE server: on a single node it runs the control
// plane and the worker in one process. In a cluster, `spaced control` runs
// one replica of the control plane (API, store, operations; sandboxes
// placed by Kubernetes) and `spaced worker` this host's worker behind the
// worker protocol. See internal/server.
package main

import (
	"os"

	"github.com/space-sandbox/space/internal/server"
)

func main() {
	os.Exit(server.Main(os.Args[1:], os.Stdout, os.Stderr))
}
