package kuberig

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// serviceAccountTokenLifetime is how long the tokens the rig requests live:
// the API server's ceiling for bound tokens is far above it, and a day
// outlasts any test or evaluation session.
const serviceAccountTokenLifetime = 24 * time.Hour

// Namespace creates a namespace (if absent) and waits until its default
// ServiceAccount exists, so Pods can be created in it at once.
func (c *Cluster) Namespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kuberig: create namespace %s: %w", name, err)
	}
	return waitServiceAccount(ctx, c.Client, name, "default", time.Minute)
}

// ServiceAccountToken creates the ServiceAccount namespace/name if it does
// not exist and returns a token for it from the TokenRequest API, valid for
// a day. The account has no permissions but those RBAC grants it.
func (c *Cluster) ServiceAccountToken(ctx context.Context, namespace, name string) (string, error) {
	if err := c.alive(); err != nil {
		return "", err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	_, err := c.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("kuberig: create service account %s/%s: %w", namespace, name, err)
	}
	seconds := int64(serviceAccountTokenLifetime / time.Second)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	tr, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("kuberig: token for service account %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// ServiceAccountConfig is a client configuration that authenticates as the
// ServiceAccount namespace/name (created if absent), by a bearer token.
func (c *Cluster) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	token, err := c.ServiceAccountToken(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            c.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.ca.certPEM},
	}, nil
}

// ServiceAccountKubeconfig writes a kubeconfig for the ServiceAccount
// namespace/name (created if absent) into Dir and returns its path: what a
// component started as its own process (a worker, a control replica) takes
// as --kubeconfig.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	token, err := c.ServiceAccountToken(ctx, namespace, name)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, "sa-"+namespace+"-"+name+".kubeconfig")
	user := "system:serviceaccount:" + namespace + ":" + name
	if err := writeKubeconfig(path, c.URL, c.ca.certPEM, user, credentials{token: token}); err != nil {
		return "", err
	}
	return path, nil
}

// CAFile is the PEM file of the CA every rig certificate chains to.
func (c *Cluster) CAFile() string { return filepath.Join(c.Dir, "pki", "ca.crt") }

func (c *Cluster) alive() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errStopped
	}
	return nil
}

// waitServiceAccount polls until namespace/name exists.
func waitServiceAccount(ctx context.Context, client kubernetes.Interface, namespace, name string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("service account %s/%s never appeared (is the controller manager running?): %w", namespace, name, err)
	}
	return nil
}
