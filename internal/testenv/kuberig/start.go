package kuberig

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
)

// serviceCIDR is the Service IP range; its first address is the
// kubernetes.default Service, which the API server's certificate names.
const (
	serviceCIDR      = "10.0.0.0/24"
	kubernetesSvcIP  = "10.0.0.1"
	serviceAccountIs = "https://kubernetes.default.svc.cluster.local"
)

// pkiFiles are the certificates and keys of one control plane.
type pkiFiles struct {
	caFile, caKeyFile      string
	etcdCAFile             string
	saKeyFile, saPubFile   string
	etcd, etcdClient       *keyPair
	apiserver, admin       *keyPair
	scheduler, controllers *keyPair // client certificates
	schedulerServing       *keyPair
	controllersServing     *keyPair
}

// makePKI makes both CAs, every certificate and the ServiceAccount signing
// key in dir, and returns the cluster CA.
func makePKI(dir string) (*authority, *pkiFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	ca, err := newAuthority(dir, "ca")
	if err != nil {
		return nil, nil, err
	}
	etcdCA, err := newAuthority(dir, "etcd-ca")
	if err != nil {
		return nil, nil, err
	}
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	f := &pkiFiles{
		caFile: filepath.Join(dir, "ca.crt"), caKeyFile: filepath.Join(dir, "ca.key"),
		saKeyFile: filepath.Join(dir, "sa.key"), saPubFile: filepath.Join(dir, "sa.pub"),
		etcdCAFile: filepath.Join(dir, "etcd-ca.crt"),
	}
	leaves := []struct {
		into   **keyPair
		signer *authority
		name   string
		req    certRequest
	}{
		// etcd's certificate serves clients and its one peer link.
		{&f.etcd, etcdCA, "etcd", certRequest{commonName: "etcd", ips: loopback, dnsNames: []string{"localhost"}, server: true, client: true}},
		{&f.etcdClient, etcdCA, "apiserver-etcd-client", certRequest{commonName: "kube-apiserver-etcd-client", client: true}},
		{&f.apiserver, ca, "apiserver", certRequest{
			commonName: "kube-apiserver", server: true,
			ips:      []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(kubernetesSvcIP)},
			dnsNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		}},
		{&f.admin, ca, "admin", certRequest{commonName: "kuberig-admin", organization: []string{"system:masters"}, client: true}},
		{&f.scheduler, ca, "scheduler", certRequest{commonName: "system:kube-scheduler", client: true}},
		{&f.controllers, ca, "controller-manager", certRequest{commonName: "system:kube-controller-manager", client: true}},
		{&f.schedulerServing, ca, "scheduler-serving", certRequest{commonName: "kube-scheduler", ips: loopback, dnsNames: []string{"localhost"}, server: true}},
		{&f.controllersServing, ca, "controller-manager-serving", certRequest{commonName: "kube-controller-manager", ips: loopback, dnsNames: []string{"localhost"}, server: true}},
	}
	for _, l := range leaves {
		kp, err := l.signer.issue(dir, l.name, l.req)
		if err != nil {
			return nil, nil, err
		}
		*l.into = kp
	}
	if err := writeSigningKey(f.saKeyFile, f.saPubFile); err != nil {
		return nil, nil, err
	}
	return ca, f, nil
}

// start brings the components up in order, each healthy before the next
// that needs it.
func (c *Cluster) start(ctx context.Context, kubeBin string, opts Options) error {
	ca, pki, err := makePKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return err
	}
	c.ca = ca
	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	etcdURL := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "https://127.0.0.1:" + strconv.Itoa(ports[1])
	c.URL = "https://127.0.0.1:" + strconv.Itoa(ports[2])
	schedulerURL := "https://127.0.0.1:" + strconv.Itoa(ports[3])
	controllersURL := "https://127.0.0.1:" + strconv.Itoa(ports[4])
	v := "--v=" + strconv.Itoa(opts.Verbosity)

	etcd, err := c.run("etcd", opts.EtcdBinary, etcdArgs(c.Dir, pki, etcdURL, peerURL)...)
	if err != nil {
		return err
	}
	etcdCA, err := os.ReadFile(pki.etcdCAFile)
	if err != nil {
		return err
	}
	if err := waitHealthy(ctx, etcd, etcdURL+"/health", etcdCA, pki.etcdClient); err != nil {
		return err
	}

	apiserver, err := c.run("kube-apiserver", kubeBin, "apiserver",
		"--etcd-servers="+etcdURL,
		"--etcd-cafile="+pki.etcdCAFile, "--etcd-certfile="+pki.etcdClient.CertFile, "--etcd-keyfile="+pki.etcdClient.KeyFile,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[2]),
		"--tls-cert-file="+pki.apiserver.CertFile, "--tls-private-key-file="+pki.apiserver.KeyFile,
		"--client-ca-file="+pki.caFile,
		"--service-account-issuer="+serviceAccountIs,
		"--service-account-key-file="+pki.saPubFile, "--service-account-signing-key-file="+pki.saKeyFile,
		"--service-cluster-ip-range="+serviceCIDR,
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		"--cert-dir="+filepath.Join(c.Dir, "apiserver-certs"),
		"--profiling=false",
		v,
	)
	if err != nil {
		return err
	}
	if err := waitHealthy(ctx, apiserver, c.URL+"/readyz", ca.certPEM, pki.admin); err != nil {
		return err
	}

	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, c.URL, ca.certPEM, "kuberig-admin", credentials{keyPair: pki.admin}); err != nil {
		return err
	}
	schedulerKubeconfig := filepath.Join(c.Dir, "scheduler.kubeconfig")
	if err := writeKubeconfig(schedulerKubeconfig, c.URL, ca.certPEM, "system:kube-scheduler", credentials{keyPair: pki.scheduler}); err != nil {
		return err
	}
	controllersKubeconfig := filepath.Join(c.Dir, "controller-manager.kubeconfig")
	if err := writeKubeconfig(controllersKubeconfig, c.URL, ca.certPEM, "system:kube-controller-manager", credentials{keyPair: pki.controllers}); err != nil {
		return err
	}
	leaderElect := "--leader-elect=" + strconv.FormatBool(opts.LeaderElect)

	scheduler, err := c.run("kube-scheduler", kubeBin, "scheduler",
		"--kubeconfig="+schedulerKubeconfig,
		"--authentication-kubeconfig="+schedulerKubeconfig, "--authorization-kubeconfig="+schedulerKubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[3]),
		"--tls-cert-file="+pki.schedulerServing.CertFile, "--tls-private-key-file="+pki.schedulerServing.KeyFile,
		"--client-ca-file="+pki.caFile,
		leaderElect, "--profiling=false", v,
	)
	if err != nil {
		return err
	}
	controllers, err := c.run("kube-controller-manager", kubeBin, "controller-manager",
		"--kubeconfig="+controllersKubeconfig,
		"--authentication-kubeconfig="+controllersKubeconfig, "--authorization-kubeconfig="+controllersKubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[4]),
		"--tls-cert-file="+pki.controllersServing.CertFile, "--tls-private-key-file="+pki.controllersServing.KeyFile,
		"--client-ca-file="+pki.caFile,
		"--root-ca-file="+pki.caFile,
		"--service-account-private-key-file="+pki.saKeyFile,
		"--use-service-account-credentials=true",
		"--cluster-signing-cert-file="+pki.caFile, "--cluster-signing-key-file="+pki.caKeyFile,
		"--node-monitor-period=1s",
		"--node-monitor-grace-period="+opts.NodeMonitorGracePeriod.String(),
		leaderElect, "--profiling=false", v,
	)
	if err != nil {
		return err
	}
	if err := waitHealthy(ctx, scheduler, schedulerURL+"/healthz", ca.certPEM, pki.admin); err != nil {
		return err
	}
	if err := waitHealthy(ctx, controllers, controllersURL+"/healthz", ca.certPEM, pki.admin); err != nil {
		return err
	}

	if c.Config, err = loadKubeconfig(c.Kubeconfig); err != nil {
		return err
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	// Pods are refused in a namespace until its default ServiceAccount
	// exists: wait for the controller manager to make the first one.
	return waitServiceAccount(ctx, c.Client, "default", "default", time.Minute)
}

// run starts one component and records it for Stop.
func (c *Cluster) run(name, bin string, args ...string) (*process, error) {
	p, err := startProcess(c.Dir, name, bin, args)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// etcdArgs run a one-member etcd whose clients and peer link all need a
// certificate etcd's own CA signed.
func etcdArgs(dir string, pki *pkiFiles, url, peerURL string) []string {
	return []string{
		"--name=kuberig",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + url, "--advertise-client-urls=" + url,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=kuberig=" + peerURL, "--initial-cluster-state=new",
		"--client-cert-auth", "--trusted-ca-file=" + pki.etcdCAFile,
		"--cert-file=" + pki.etcd.CertFile, "--key-file=" + pki.etcd.KeyFile,
		"--peer-client-cert-auth", "--peer-trusted-ca-file=" + pki.etcdCAFile,
		"--peer-cert-file=" + pki.etcd.CertFile, "--peer-key-file=" + pki.etcd.KeyFile,
		"--logger=zap", "--log-level=warn",
	}
}
