package devcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/secrets"
	"github.com/space-sandbox/space/internal/testenv/kuberig"
	"github.com/space-sandbox/space/internal/testenv/pgtest"
	"github.com/space-sandbox/space/internal/testenv/s3test"
	"github.com/space-sandbox/space/internal/worker/remote"
)

// Info is what cluster.json records: enough to use the cluster and to stop
// every process of it by PID.
type Info struct {
	Dir        string        `json:"dir"`
	Supervisor int           `json:"supervisor_pid"` // the launcher's process
	Ready      bool          `json:"ready"`          // everything started
	Controls   []ControlInfo `json:"controls"`
	Workers    []WorkerInfo  `json:"workers"`
	Kubeconfig string        `json:"kubeconfig"`
	Namespace  string        `json:"namespace"`
	// AdminKeyFile holds the bootstrap admin API key every control registers.
	AdminKeyFile      string `json:"admin_key_file"`
	Postgres          string `json:"postgres"` // DSN of the store (with its password)
	S3                string `json:"s3"`       // objstore URL of the bucket
	S3CredentialsFile string `json:"s3_credentials_file"`
	WorkerTokenFile   string `json:"worker_token_file"`
	// SecretsKeyFile seals tenants' secrets; the replicas share it.
	SecretsKeyFile string `json:"secrets_key_file"`
	// Servers are the other processes: etcd, the Kubernetes components,
	// PostgreSQL and SeaweedFS.
	Servers []ServerInfo `json:"servers"`
	// Note says what did not start and why (e.g. a spaced without
	// `spaced control`).
	Note string `json:"note,omitempty"`
}

// ControlInfo is one control replica.
type ControlInfo struct {
	URL     string `json:"url"`
	PID     int    `json:"pid"`
	DataDir string `json:"data_dir"`
	Log     string `json:"log"`
}

// WorkerInfo is one worker.
type WorkerInfo struct {
	Name    string `json:"name"`
	PID     int    `json:"pid"`
	DataDir string `json:"data_dir"`
	Address string `json:"address"` // the worker protocol's host:port
	Log     string `json:"log"`
}

// ServerInfo is one supporting server process.
type ServerInfo struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	Log  string `json:"log,omitempty"`
	// Match is in the process's command line (a PID reused since is not
	// ours); Dir, when set, is a directory of its outside the cluster's.
	Match string `json:"match"`
	Dir   string `json:"dir,omitempty"`
}

// ReadInfo reads dir's cluster.json.
func ReadInfo(dir string) (Info, error) {
	var info Info
	b, err := os.ReadFile(filepath.Join(dir, InfoFile))
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("%s: %w", filepath.Join(dir, InfoFile), err)
	}
	return info, nil
}

// writeInfo writes cluster.json atomically (mode 0600: it holds the DSN).
func (c *Cluster) writeInfo() error {
	c.Info.Controls, c.Info.Workers = nil, nil
	for _, p := range c.controls {
		c.Info.Controls = append(c.Info.Controls, ControlInfo{URL: "http://" + p.addr, PID: p.pid(), DataDir: p.dataDir, Log: p.logPath})
	}
	for _, p := range c.workers {
		c.Info.Workers = append(c.Info.Workers, WorkerInfo{Name: p.name, PID: p.pid(), DataDir: p.dataDir, Address: p.addr, Log: p.logPath})
	}
	b, err := json.MarshalIndent(c.Info, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(c.opts.Dir, InfoFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(c.opts.Dir, InfoFile))
}

// startServers starts the Kubernetes control plane, PostgreSQL and
// SeaweedFS, and writes the shared secrets (worker token, S3 credentials).
func (c *Cluster) startServers(ctx context.Context) error {
	c.progress("starting etcd, kube-apiserver, kube-scheduler and kube-controller-manager (a first run builds them: minutes)")
	kube, err := kuberig.Run(ctx, filepath.Join(c.opts.Dir, "kube"), kuberig.Options{
		NodeMonitorGracePeriod: c.opts.NodeMonitorGracePeriod,
	})
	if err != nil {
		return err
	}
	c.kube = kube
	c.Info.Kubeconfig = kube.Kubeconfig
	for _, comp := range kube.Components() {
		c.Info.Servers = append(c.Info.Servers, ServerInfo{Name: comp.Name, PID: comp.PID, Log: comp.Log, Match: kube.Dir})
	}
	_, err = kube.Client.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.opts.Namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", c.opts.Namespace, err)
	}

	c.progress("starting PostgreSQL")
	if c.pg, err = pgtest.Start(); err != nil {
		return err
	}
	if c.Info.Postgres, err = createDatabase(ctx, c.pg, "space"); err != nil {
		return err
	}
	c.Info.Servers = append(c.Info.Servers, ServerInfo{Name: "postgres", PID: postmasterPID(c.pg.Dir()),
		Log: filepath.Join(c.pg.Dir(), "server.log"), Match: c.pg.Dir(), Dir: c.pg.Dir()})

	c.progress("starting SeaweedFS (S3)")
	weed, err := s3test.BinaryPath(c.opts.ModuleRoot)
	if err != nil {
		return err
	}
	if c.s3, err = s3test.Start(ctx, s3test.Options{Binary: weed, DataDir: filepath.Join(c.opts.Dir, "s3"), Bucket: "space"}); err != nil {
		return err
	}
	c.Info.S3 = c.s3.URL()
	c.Info.Servers = append(c.Info.Servers, ServerInfo{Name: "weed", PID: c.s3.PID, Log: c.s3.LogFile, Match: c.s3.DataDir})
	c.Info.S3CredentialsFile = filepath.Join(c.opts.Dir, "s3.credentials")
	creds := "access_key=" + c.s3.AccessKey + "\nsecret_key=" + c.s3.SecretKey + "\n"
	if err := os.WriteFile(c.Info.S3CredentialsFile, []byte(creds), 0o600); err != nil {
		return err
	}

	c.Info.WorkerTokenFile = filepath.Join(c.opts.Dir, "worker.token")
	if _, _, err := remote.EnsureToken(c.Info.WorkerTokenFile); err != nil {
		return err
	}
	c.Info.SecretsKeyFile = filepath.Join(c.opts.Dir, secrets.KeyFile)
	if _, err := secrets.LoadKey(c.Info.SecretsKeyFile); err != nil {
		return err
	}
	c.Info.AdminKeyFile = filepath.Join(c.opts.Dir, "admin.key")
	key, err := auth.GenerateKey()
	if err != nil {
		return err
	}
	// Every replica registers this one bootstrap admin key (hashed).
	if err := os.WriteFile(c.Info.AdminKeyFile, []byte(key+"\n"), 0o600); err != nil {
		return err
	}
	return c.writeInfo() // so Down finds the servers should the rest fail
}

// createDatabase makes database name on pg and returns its DSN.
func createDatabase(ctx context.Context, pg *pgtest.Server, name string) (string, error) {
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("postgres: create database %s: %w", name, err)
	}
	return pg.DSN(name), nil
}

// postmasterPID is the server's PID from its postmaster.pid (0 if unread).
func postmasterPID(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}
