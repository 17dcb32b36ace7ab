package kuberig

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// credentials are what a kubeconfig user presents: a client certificate or
// a bearer token.
type credentials struct {
	keyPair *keyPair
	token   string
}

// writeKubeconfig writes a one-cluster, one-user kubeconfig with every
// credential embedded (readable by its owner only), so it stays valid when
// copied.
func writeKubeconfig(path, server string, caPEM []byte, user string, cred credentials) error {
	auth := &clientcmdapi.AuthInfo{Token: cred.token}
	if cred.keyPair != nil {
		auth.ClientCertificateData = cred.keyPair.CertPEM
		auth.ClientKeyData = cred.keyPair.KeyPEM
	}
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"kuberig": {Server: server, CertificateAuthorityData: caPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{user: auth},
		Contexts:       map[string]*clientcmdapi.Context{"kuberig": {Cluster: "kuberig", AuthInfo: user}},
		CurrentContext: "kuberig",
	}
	if err := clientcmd.WriteToFile(cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// loadKubeconfig reads a kubeconfig the way any client would, so the file
// the rig hands out is the one its own clients proved.
func loadKubeconfig(path string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	return cfg, nil
}
