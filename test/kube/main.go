// Command kube is one multi-call binary holding the Kubernetes control plane
// that SPACE's cluster tests and `make cluster` run on one machine:
// kube-apiserver, kube-scheduler and kube-controller-manager, built from
// k8s.io/kubernetes through the Go module proxy (Debian ships none of them).
//
// It picks the component from the name it was run as (a symlink named
// kube-apiserver, kube-scheduler or kube-controller-manager) or from its first
// argument:
//
//	kube apiserver --etcd-servers=… …
//	kube scheduler --kubeconfig=… …
//	kube controller-manager --kubeconfig=… …
//
// Each component is the upstream cobra command, unchanged: flags, defaults and
// behaviour are those of the release named in go.mod. This module is apart
// from SPACE's own so the main module never links Kubernetes' server code;
// scripts/kube-build.sh builds it and internal/testenv/kuberig runs it.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	_ "time/tzdata" // CronJob time zones, as upstream's mains do

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // the JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// components maps each accepted name to the upstream command it runs.
var components = map[string]func() *cobra.Command{
	"apiserver":          apiserver.NewAPIServerCommand,
	"scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"controller-manager": controllermanager.NewControllerManagerCommand,
}

func main() {
	name, args := pick(os.Args)
	newCommand, ok := components[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "usage: kube apiserver|scheduler|controller-manager [flags]\n")
		os.Exit(2)
	}
	command := newCommand()
	command.SetArgs(args)
	os.Exit(cli.Run(command))
}

// pick returns the component named by argv[0] (kube-<component>) or, failing
// that, by the first argument, and the arguments left for the component.
func pick(argv []string) (string, []string) {
	if len(argv) == 0 {
		return "", nil
	}
	if base := filepath.Base(argv[0]); strings.HasPrefix(base, "kube-") {
		if _, ok := components[strings.TrimPrefix(base, "kube-")]; ok {
			return strings.TrimPrefix(base, "kube-"), argv[1:]
		}
	}
	if len(argv) < 2 {
		return "", nil
	}
	return argv[1], argv[2:]
}
