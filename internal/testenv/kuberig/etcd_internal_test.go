package kuberig

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// etcd takes only the API server's client certificate: not one the cluster
// CA signed (an admin's, a component's), and not an anonymous client.
func TestEtcdTakesOnlyTheAPIServersCertificate(t *testing.T) {
	dir := t.TempDir()
	_, pki, err := makePKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	url := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	p, err := startProcess(dir, "etcd", "/usr/bin/etcd", etcdArgs(dir, pki, url, "https://127.0.0.1:"+strconv.Itoa(ports[1])))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	etcdCA, err := os.ReadFile(pki.etcdCAFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitHealthy(ctx, p, url+"/health", etcdCA, pki.etcdClient); err != nil {
		t.Fatal(err)
	}
	for name, cert := range map[string]*keyPair{"admin": pki.admin, "scheduler": pki.scheduler, "none": nil} {
		hc, err := probeClient(etcdCA, cert)
		if err != nil {
			t.Fatal(err)
		}
		if err := probe(ctx, hc, url+"/v3/kv/range"); err == nil {
			t.Errorf("etcd answered a client with the %s certificate", name)
		}
		hc.CloseIdleConnections()
	}
}
