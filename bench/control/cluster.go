package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/space-sandbox/space/internal/devcluster"
)

// startCluster starts -replicas control replicas on PostgreSQL and
// -workers simulated workers, each a Kubernetes node with room for its
// share of the run's sandboxes (internal/devcluster).
func startCluster(ctx context.Context, cfg config) (target, func(), error) {
	if os.Geteuid() != 0 {
		return target{}, nil, fmt.Errorf("-mode cluster runs the kube rig and PostgreSQL as make cluster does: run as root")
	}
	dir, err := os.MkdirTemp("", "sbc-") // short: devcluster keeps sockets under it
	if err != nil {
		return target{}, nil, err
	}
	addrs := make([]string, cfg.replicas)
	for i := range addrs {
		addrs[i] = "127.0.0.1:0"
	}
	// Each worker holds its share of the sandboxes (and the warm-up and
	// stragglers): its Pods count as many, at one vCPU and 256 MiB each (and the Pod overhead).
	perWorker := cfg.room()/cfg.workers + 16
	cl, err := devcluster.Start(ctx, devcluster.Options{
		Dir: dir, Spaced: cfg.spaced, ControlAddrs: addrs, Workers: cfg.workers, SimulatedWorkers: true,
		WorkerSandboxes: perWorker, WorkerVCPUs: perWorker, WorkerMemoryMiB: perWorker * 512,
		ControlArgs: append(cfg.quotaArgs(), strings.Fields(cfg.serverArgs)...),
		WorkerArgs:  strings.Fields(cfg.workerArgs),
		Progress:    os.Stderr,
	})
	if err != nil {
		os.RemoveAll(dir)
		return target{}, nil, err
	}
	stop := func() {
		cl.Stop()
		os.RemoveAll(dir)
	}
	key, err := os.ReadFile(cl.Info.AdminKeyFile)
	if err != nil {
		stop()
		return target{}, nil, err
	}
	debug, err := debugAddress(cl.Info.Controls[0].Log)
	if err != nil {
		stop()
		return target{}, nil, err
	}
	return target{urls: cl.ControlURLs(), key: strings.TrimSpace(string(key)), debugURL: debug, workers: cfg.workers, store: "postgres",
		describes: "cluster, " + strconv.Itoa(cfg.replicas) + " control replicas on PostgreSQL, kube-scheduler, " +
			strconv.Itoa(cfg.workers) + " simulated workers"}, stop, nil
}
